"""How an endpoint is served, as facts the charts, the planner, the simulator and the benchmark share: LMCache settings
and their arithmetic, the L2 mount path, the router's session header and kv-aware threshold. The one source for the
standalone ConfigMap, the operator worker environment and the Kyverno rewiring, so no two paths drift. Plain Python:
nothing here imports cdk8s, constructs or charts, so every layer above config may import it.

Keys are LMCache 0.4.3 `_CONFIG_DEFINITIONS` names (tests parse them with LMCache's own loader). LMCache reads
`LMCACHE_CONFIG_FILE` first and then lets `LMCACHE_<KEY>` variables override it (`lmcache_get_or_create_config`,
0.3.9-0.5.6), so the environment we set also wins over any file the operator may mount.

Host memory: `cache.l1_gb` is per replica. LMCache 0.4.3 starts one engine in each vLLM worker process, i.e. per
tensor-parallel rank (`integration/vllm/vllm_service_factory.py::get_or_create_lmcache_engine`, metadata with
`worker_id=parallel_config.rank`), and each engine pins `max_local_cpu_size * 1024**3` bytes
(`v1/cache_engine.py`, `MixedMemoryAllocator`). So each rank gets `l1_gb / tensor_parallel`, and the same for the
staging buffer; the replica pins `l1_gb` in all.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kvtier.catalog import LMCACHE_STAGING_GIB
from kvtier.config.endpoint import CacheConfig, Endpoint, HuggingFaceModel
from kvtier.versions import (
    NATIVE_VLLM_IMAGE,
    NATIVE_VLLM_VERSION,
    OPERATOR_LMCACHE_VERSION,
    OPERATOR_VLLM_IMAGE,
    STANDALONE_LMCACHE_VERSION,
    STANDALONE_VLLM_IMAGE,
)

# LMCache stores whole chunks only (one L2 file per `chunk_size` tokens; the last partial chunk of a prompt is
# recomputed by the next reader): rendered into every endpoint, and the planner and simulator count hits with it.
SAVE_UNFULL_CHUNK = False
ENV_PREFIX = "LMCACHE_"
# Where pods mount their LOB's L2 volume (design "L2 layout").
L2_MOUNT_PATH = "/mnt/kvtier/l2"
L2_CLAIM = "l2-cache"
L2_VOLUME = "kvtier-l2"
# Cache keys use Python hashing: every pod sharing L2 needs the same seed (curvine-lmcache.md 2.5).
HASH_SEED = "0"
# `cachegen` silently never stores with remote connectors (curvine-lmcache.md 2.6).
SERDE = "naive"
# With L1 off LMCache still stages L2 transfers in pinned host memory (LocalCPUBackend with local_cpu=False); GiB per
# replica, like l1_gb (the catalog's fact, which the planner also counts).
L2_STAGING_GB = LMCACHE_STAGING_GIB.value
# Marks the vLLM container of an operator pod whose L2 Kyverno rewires to Curvine (read by the per-LOB Policy).
L2_MARKER = "KVTIER_L2_BACKEND"
# The endpoint's L2 identity on that container: the Policy builds the URL from it and the pod's `app` label.
L2_IDENTITY_VAR = "KVTIER_L2_IDENTITY"
L2_IDENTITY_CHARS = 12  # hex digits of SHA-256: 48 bits, so two identities of one endpoint never meet by chance
# Bumped only when the meaning of an existing fact changes; a new optional fact needs no bump, because unset facts
# are left out of the digest (docs/l2.md "One directory per model build").
L2_IDENTITY_SCHEMA = 2
# LMCache settings that change the bytes of an L2 file or its key, pinned so that no other config file (the operator's
# own `lmcache-config`) or default can change them under one identity (docs/references.md, issue 24):
# `save_chunk_meta` (in `extra_config`, default True) writes a header a reader without it misreads; `use_layerwise`
# (default False) changes the key layout and forces the header on.
SAVE_CHUNK_META = True
USE_LAYERWISE = False
# The LMCache version inside each default image (the identity names the one that actually runs); an image not listed
# here is covered by the `image` fact alone.
IMAGE_LMCACHE_VERSIONS: dict[str, str] = {
    OPERATOR_VLLM_IMAGE: OPERATOR_LMCACHE_VERSION,
    STANDALONE_VLLM_IMAGE: STANDALONE_LMCACHE_VERSION,
}
# `cache.connector: vllm` (vLLM 0.32.0's OffloadingConnector, docs/references.md "Issue 24: vLLM's own L2 connector"):
# the spec with a CPU primary tier (L1) and an `fs` secondary tier (L2), or the CPU tier alone without an L2.
VLLM_CONNECTOR = "OffloadingConnector"
VLLM_TIERING_SPEC = "TieringOffloadingSpec"
VLLM_CPU_SPEC = "CPUOffloadingSpec"
VLLM_FS_TIER = "fs"
# The prefix-cache block hash the fs tier names its files by (vLLM's default, rendered explicitly so that no default
# change moves it). With PYTHONHASHSEED set (HASH_SEED, on every replica) vLLM seeds the hash chain with it.
VLLM_HASH_ALGO = "sha256"
# The vLLM version inside each default image of the vLLM connector (part of its identity).
IMAGE_VLLM_VERSIONS: dict[str, str] = {NATIVE_VLLM_IMAGE: NATIVE_VLLM_VERSION}
GIB = 1024**3
# LMCache's and prometheus_client's multi-process metrics: the API server must see the engine's files.
PROMETHEUS_DIR = "/tmp"
# kvaware (operator mode, whose router is not kvtier's): the simulator's model falls back (session key, else QPS) when
# the best pod matched fewer than len(prompt) - this many tokens, production-stack's `--kv-aware-threshold` default
# (vllm-project/production-stack@a6c01db src/vllm_router/parsers/parser.py; docs/references.md "production-stack
# router"); here so that the simulator and the CLI share it.
KV_AWARE_THRESHOLD = 2000
# The header the standalone router's `session` (and kvaware's fallback) routing hashes (its --session-key), and the
# one `kvtier bench shared-prefix` sends by default.
SESSION_HEADER = "x-session-id"
# The standalone router's (vllm-router 0.1.17) counter of the requests each replica served, label `worker` (its
# URL), on its Prometheus port: `kvtier bench --router-metrics-url` reads which replica served each request from it.
ROUTER_SERVED_METRIC = "vllm_router_processed_requests_total"
ROUTER_WORKER_LABEL = "worker"


def env_name(key: str) -> str:
    """`max_local_cpu_size` -> `LMCACHE_MAX_LOCAL_CPU_SIZE` (LMCache's env loader reads only defined keys)."""
    return ENV_PREFIX + key.upper()


def l2_identity_facts(endpoint: Endpoint) -> dict[str, Any]:
    """Everything that makes an endpoint's KV incompatible with what it wrote before, and only what is set.

    LMCache 0.4.3 names an L2 file `<--model>@<world_size>@<worker_id>@<chunk_hash>@<dtype>.data` (`CacheEngineKey`,
    fs connector): operator pods always pass `--model /opt/ml/model`, and a new revision, re-uploaded weights or a
    new image keep every key. So the L2 directory carries a digest of these facts instead (docs/l2.md). Unset facts
    are left out (no null placeholders), so adding an optional fact later leaves every existing identity as it is.
    """
    model = endpoint.model
    weights = model.revision if isinstance(model, HuggingFaceModel) else f"s3://{model.bucket}/{model.prefix}"
    if endpoint.cache.connector == "vllm":
        return _vllm_identity_facts(endpoint, weights)
    facts: dict[str, Any] = {
        "schema": L2_IDENTITY_SCHEMA,
        "model": model.id,
        "weights": weights,  # the Hugging Face commit, or the S3 prefix
        "weights_version": model.weights_version,
        "dtype": endpoint.dtype,
        "tensor_parallel": endpoint.tensor_parallel,
        "chunk_size": endpoint.cache.chunk_size,
        "serde": SERDE,
        "hash_seed": HASH_SEED,
        "save_chunk_meta": SAVE_CHUNK_META,
        "use_layerwise": USE_LAYERWISE,
        "lmcache": IMAGE_LMCACHE_VERSIONS.get(endpoint.container_image),  # of the image that runs
        "image": endpoint.container_image,  # its LMCache and vLLM versions (chunk layout, hashing)
    }
    return {key: value for key, value in facts.items() if value is not None}


def _vllm_identity_facts(endpoint: Endpoint, weights: str | None) -> dict[str, Any]:
    """vLLM's fs tier names a file `<--model>_<h12>_r<rank>/.../<block hash>.bin` (vllm/v1/kv_offload/file_mapper.py):
    the block hash chains `--block-size` tokens from a seed (PYTHONHASHSEED) with `--prefix-caching-hash-algo`. The
    `connector` fact keeps its directory apart from an LMCache identity of the same endpoint, so the two never
    share files; LMCache's chunk settings do not apply."""
    facts: dict[str, Any] = {
        "schema": L2_IDENTITY_SCHEMA,
        "connector": "vllm",
        "model": endpoint.model.id,
        "weights": weights,
        "weights_version": endpoint.model.weights_version,
        "dtype": endpoint.dtype,
        "tensor_parallel": endpoint.tensor_parallel,
        "block_size": endpoint.block_size,
        "hash_algo": VLLM_HASH_ALGO,
        "hash_seed": HASH_SEED,
        "vllm": IMAGE_VLLM_VERSIONS.get(endpoint.container_image),
        "image": endpoint.container_image,
    }
    return {key: value for key, value in facts.items() if value is not None}


def l2_file_tokens(endpoint: Endpoint) -> int:
    """Tokens per L2 file, the granularity of an L2 hit: LMCache's `chunk_size`, or, on vLLM's connector, one vLLM
    block (its fs tier stores one file per full `--block-size` block, vllm/v1/kv_offload/file_mapper.py). Either
    stores whole units only, so the reader of a prompt recomputes the last partial one."""
    return endpoint.block_size if endpoint.cache.connector == "vllm" else endpoint.cache.chunk_size


def l2_file_unit(endpoint: Endpoint) -> str:
    """What one L2 file holds, in reports: an LMCache chunk, or a vLLM block on vLLM's own connector."""
    return "vLLM block" if endpoint.cache.connector == "vllm" else "LMCache chunk"


def l2_identity(endpoint: Endpoint) -> str:
    """A short digest of `l2_identity_facts`: a changed identity starts cold in a new directory."""
    facts = json.dumps(l2_identity_facts(endpoint), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(facts.encode()).hexdigest()[:L2_IDENTITY_CHARS]


def l2_subdir(endpoint: Endpoint) -> str:
    """`<endpoint>/<identity>`: where the endpoint writes, relative to its LOB's L2 volume (design "L2 layout")."""
    return f"{endpoint.name}/{l2_identity(endpoint)}"


def l2_dir_url(subdir: str) -> str:
    """The URL of a directory on the LOB's L2 volume; LMCache's URL parser needs a host and port (unused).
    `subdir` may hold policy variables (the Kyverno rewiring)."""
    return f"fs://localhost:0{L2_MOUNT_PATH}/{subdir}/"


def l2_url(endpoint: Endpoint) -> str:
    """The endpoint's LMCache `remote_url`."""
    return l2_dir_url(l2_subdir(endpoint))


def vllm_offload_config(cache: CacheConfig, l2_dir: str) -> dict[str, Any]:
    """vLLM's `--kv-transfer-config` for `cache.connector: vllm`: the CPU tier holds `l1_gb` per replica (all ranks:
    vLLM divides `cpu_bytes_to_use` among them, vllm/v1/kv_offload/cpu/spec.py) and, with `l2: curvine`, the `fs`
    tier writes below the endpoint's identity directory `l2_dir` of the LOB's L2 volume. A block vLLM found but cannot
    read is computed again (`kv_load_failure_policy`), as for LMCache."""
    extra: dict[str, Any] = {"spec_name": VLLM_CPU_SPEC, "cpu_bytes_to_use": int(cache.l1_gb * GIB)}
    if cache.l2 == "curvine":
        extra["spec_name"] = VLLM_TIERING_SPEC
        extra["secondary_tiers"] = [{"type": VLLM_FS_TIER, "root_dir": f"{L2_MOUNT_PATH}/{l2_dir}"}]
    return {
        "kv_connector": VLLM_CONNECTOR,
        "kv_role": "kv_both",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": extra,
    }


def l1_pinned_gib(cache: CacheConfig) -> float:
    """Host memory LMCache pins in one replica, in GiB (all its ranks together): `l1_gb`, or the L2 staging buffer
    when L1 is off and an L2 is on. Pod memory requests and the planner's node-RAM check count this."""
    if cache.l1_gb > 0:
        return float(cache.l1_gb)
    return L2_STAGING_GB if cache.l2 != "none" else 0.0


def rank_cpu_size_gib(cache: CacheConfig, tensor_parallel: int) -> float:
    """`max_local_cpu_size` of each of a replica's `tensor_parallel` LMCache engines (one per rank)."""
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel {tensor_parallel} is below 1")
    return l1_pinned_gib(cache) / tensor_parallel


def lmcache_config(cache: CacheConfig, l2_dir: str, *, tensor_parallel: int = 1) -> dict[str, Any]:
    """LMCache settings (file form) of one endpoint; empty when it uses neither L1 nor L2, or vLLM's connector.

    `remote_url` (the directory `l2_dir` of the L2 volume, `l2_subdir`) is set for `l2: curvine` only; for
    `tieredstorage` the operator injects its own. `tensor_parallel` is the endpoint's (ranks per replica).
    """
    if cache.connector != "lmcache" or (cache.l1_gb == 0 and cache.l2 == "none"):
        return {}
    config: dict[str, Any] = {
        "chunk_size": cache.chunk_size,
        "local_cpu": cache.l1_gb > 0,
        "max_local_cpu_size": rank_cpu_size_gib(cache, tensor_parallel),
        "save_unfull_chunk": SAVE_UNFULL_CHUNK,
        "remote_serde": SERDE,
    }
    if cache.l2 == "curvine":
        config["remote_url"] = l2_dir_url(l2_dir)
        config |= curvine_format()
    return config


def curvine_format() -> dict[str, Any]:
    """The file-format settings of a Curvine L2, pinned in both modes (part of the identity). Not for
    `tieredstorage`: there the operator owns `extra_config`, and LMCache's env loader replaces it whole."""
    return {"use_layerwise": USE_LAYERWISE, "extra_config": {"save_chunk_meta": SAVE_CHUNK_META}}


def env_value(value: Any) -> str:
    """A setting as LMCache's env loader parses it (bools by name, lists comma-separated, dicts as JSON)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def lmcache_env(config: dict[str, Any], *, omit: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    """Settings as `LMCACHE_<KEY>` variables, in key order."""
    return [{"name": env_name(k), "value": env_value(v)} for k, v in sorted(config.items()) if k not in omit]


def hash_seed_env() -> dict[str, str]:
    return {"name": "PYTHONHASHSEED", "value": HASH_SEED}


def rewire_env(l2_dir: str) -> list[dict[str, str]]:
    """What the Kyverno policy sets on an operator pod for `l2: curvine` (`l2_dir` holds policy variables)."""
    config = lmcache_config(CacheConfig(l2="curvine"), l2_dir)
    keys = {"remote_url", "remote_serde", *curvine_format()}
    return [*lmcache_env({k: v for k, v in config.items() if k in keys}), hash_seed_env()]
