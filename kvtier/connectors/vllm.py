"""vLLM's own connector (`cache.connector: vllm`, standalone mode): vLLM 0.32.0's OffloadingConnector with
TieringOffloadingSpec, its CPU tier in `/dev/shm` as L1 and an `fs` secondary tier on the LOB's Curvine volume as L2
(docs/references.md "Issue 24: vLLM's own L2 connector"); no LMCache anywhere in the pod.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from kvtier import serving
from kvtier.catalog import Model
from kvtier.config.base import image_by_tag, image_content
from kvtier.config.endpoint import CacheConfig, Endpoint
from kvtier.connectors import pods
from kvtier.connectors.base import (
    EXTERNAL_HITS,
    EXTERNAL_QUERIES,
    Connector,
    EngineWiring,
    FileUnit,
    HitMetrics,
    L2Layout,
    Obj,
    ReadEfficiency,
    Refusal,
    Series,
    model_kind_facts,
    set_facts,
    weights_fact,
)
from kvtier.serving import GIB, HASH_SEED, L2_IDENTITY_SCHEMA, L2_MOUNT_PATH
from kvtier.versions import NATIVE_VLLM_IMAGE, NATIVE_VLLM_VERSION, OPERATOR_VLLM_IMAGE, OPERATOR_VLLM_VERSION

# The spec with a CPU primary tier (L1) and an `fs` secondary tier (L2), or the CPU tier alone without an L2.
VLLM_CONNECTOR = "OffloadingConnector"
VLLM_TIERING_SPEC = "TieringOffloadingSpec"
VLLM_CPU_SPEC = "CPUOffloadingSpec"
VLLM_FS_TIER = "fs"
# The prefix-cache block hash the fs tier names its files by (vLLM's default, rendered explicitly so that no default
# change moves it). With PYTHONHASHSEED set (HASH_SEED, on every replica) vLLM seeds the hash chain with it.
VLLM_HASH_ALGO = "sha256"
# The vLLM version inside each default image of the vLLM connector (part of its identity).
IMAGE_VLLM_VERSIONS: dict[str, str] = {NATIVE_VLLM_IMAGE: NATIVE_VLLM_VERSION}

# vLLM 0.32.0's OffloadingConnector with TieringOffloadingSpec: per tier, label `tier` = "0:primary" (the CPU tier,
# L1) or "<n>:<type>" for secondary tier n (vllm/v1/kv_offload/tiering/base.py, metrics.py); kvtier configures one
# secondary tier, the `fs` tier on L2.
OFFLOAD_TIER_READ_BYTES = "vllm:kv_offload_tiering_read_bytes_total"  # a secondary tier's reads (promotions)
OFFLOAD_TIER_WRITE_BYTES = "vllm:kv_offload_tiering_write_bytes_total"  # a secondary tier's writes (cascades)
OFFLOAD_TIER_CHUNK_QUERIES = "vllm:kv_offload_tiering_chunk_queries_total"
# A promotion job (one request's blocks of one scheduler step, loaded from a secondary tier) that failed: its blocks
# are computed again (`kv_load_failure_policy: recompute`), so the request succeeds and only this counter tells.
OFFLOAD_TIER_PROMOTION_FAILURES = "vllm:kv_offload_tiering_promotion_job_failures_total"
OFFLOAD_TIER_CHUNK_HITS = "vllm:kv_offload_tiering_chunk_hits_total"
OFFLOAD_TIER_LABEL = "tier"
OFFLOAD_FS_TIER = "1:fs"  # the first (and only) secondary tier kvtier renders
FS_TIER_LABELS = ((OFFLOAD_TIER_LABEL, OFFLOAD_FS_TIER),)


def vllm_offload_config(cache: CacheConfig, l2_dir: str) -> dict[str, Any]:
    """vLLM's `--kv-transfer-config`: the CPU tier holds `l1_gb` per replica (all ranks: vLLM divides
    `cpu_bytes_to_use` among them, vllm/v1/kv_offload/cpu/spec.py) and, with `l2: curvine`, the `fs` tier writes below
    the endpoint's identity directory `l2_dir` of the LOB's L2 volume. A block vLLM found but cannot read is computed
    again (`kv_load_failure_policy`), as for LMCache."""
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


class VllmConnector(Connector):
    name: ClassVar[str] = "vllm"
    title: ClassVar[str] = "vLLM's connector"
    # vLLM 0.32.0 fs tier: `<root_dir>/<model, '/' as '_'>_<h12>_r<rank>/<hhh>/<hh>_g<group>/<block hash>.bin`,
    # written as `<file>_<random 63-bit>.tmp` and `os.replace`d (docs/references.md "Issue 24").
    layout: ClassVar[L2Layout] = L2Layout(
        data_example="meta-llama_Llama-3.1-8B-Instruct_0c1d2e3f4a5b_r0/3a7/9c_g0/3a79c0d1e2f3.bin",
        temp_example="meta-llama_Llama-3.1-8B-Instruct_0c1d2e3f4a5b_r0/3a7/9c_g0/3a79c0d1e2f3.bin_4611686018427387904.tmp",
        temp_suffix=".tmp",
        temp_max_age_minutes=60,  # a write renames its temporary file when it ends, as LMCache's does
        source="vllm-project/vllm@v0.32.0:vllm/v1/kv_offload/file_mapper.py `get_file_name`; "
        "vllm/v1/kv_offload/tiering/fs/io.py `_get_tmp_suffix`, `_store_block`",
    )
    hits: ClassVar[HitMetrics] = HitMetrics(
        l2_write_bytes=Series(OFFLOAD_TIER_WRITE_BYTES, FS_TIER_LABELS),
        l2_read_bytes=Series(OFFLOAD_TIER_READ_BYTES, FS_TIER_LABELS),
        lookup_tokens=Series(EXTERNAL_QUERIES),
        lookup_hits=Series(EXTERNAL_HITS),
        hit_tokens=(Series(EXTERNAL_HITS),),
        # A counter with labels appears once it is first counted: every fs-tier lookup counts a query, a read a hit.
        loaded=Series(OFFLOAD_TIER_CHUNK_QUERIES, FS_TIER_LABELS),
        reported=(Series(OFFLOAD_TIER_READ_BYTES, FS_TIER_LABELS), Series(EXTERNAL_QUERIES), Series(EXTERNAL_HITS)),
        l2_io=(
            ("read_bytes", Series(OFFLOAD_TIER_READ_BYTES, FS_TIER_LABELS)),
            ("write_bytes", Series(OFFLOAD_TIER_WRITE_BYTES, FS_TIER_LABELS)),
        ),
        l2_name="vLLM's fs tier",
        load_failures=Series(OFFLOAD_TIER_PROMOTION_FAILURES, FS_TIER_LABELS),
    )
    # vLLM 0.32.0's fs tier loading an L2 hit into its CPU tier (one pool job a hit: its C extension reads the
    # blocks one after another, O_DIRECT where the mount takes it), over a plain reader of the same files on tmpfs.
    read_efficiency: ClassVar[ReadEfficiency] = ReadEfficiency(
        ((2_359_296, 0.97), (18_874_368, 2.41)),
        "make bench-l2 (tools/benchl2.py), docs/benchmarks.md 'L2 read efficiency': the tmpfs rows of vLLM's fs tier",
    )
    fact_meanings: ClassVar[Mapping[str, str]] = {}
    env_prefixes: ClassVar[tuple[str, ...]] = ()
    series_prefix: ClassVar[str] = "vllm:kv_offload_"

    def refusals(self, endpoint: Endpoint) -> list[Refusal]:
        """It needs a vLLM with the OffloadingConnector's `fs` tier (newer than the operator image's) and its CPU
        tier (every L2 block passes through it)."""
        if endpoint.mode != "standalone":
            return [
                Refusal(
                    "cache.connector",
                    f"vLLM's connector cannot run in operator mode: the operator image {OPERATOR_VLLM_IMAGE} ships "
                    f"vLLM {OPERATOR_VLLM_VERSION}, which has no `fs` tier for its OffloadingConnector (vLLM 0.22 and "
                    "later), and the Inference Operator wires LMCache's connector itself",
                    "use connector: lmcache in operator mode, or mode: standalone",
                )
            ]
        if endpoint.cache.l1_gb == 0:
            return [
                Refusal(
                    "cache.l1_gb",
                    "vLLM's connector passes every block through its CPU tier (`cpu_bytes_to_use` is required)",
                    "set l1_gb above 0 (its host memory per replica, like 20), or use connector: lmcache",
                )
            ]
        return []

    def identity_facts(self, endpoint: Endpoint) -> dict[str, Any]:
        """vLLM's fs tier names a file `<--model>_<h12>_r<rank>/.../<block hash>.bin` (vllm/v1/kv_offload/
        file_mapper.py): the block hash chains `--block-size` tokens from a seed (PYTHONHASHSEED) with
        `--prefix-caching-hash-algo`. The `connector` fact keeps its directory apart from an LMCache identity of the
        same endpoint, so the two never share files; LMCache's chunk settings do not apply."""
        image = self.image(endpoint)
        return set_facts(
            {
                "schema": L2_IDENTITY_SCHEMA,
                "connector": self.name,
                "model": endpoint.model.id,
                "weights": weights_fact(endpoint),
                "weights_version": endpoint.model.weights_version,
                "dtype": endpoint.dtype,
                "tensor_parallel": endpoint.tensor_parallel,
                "block_size": endpoint.block_size,
                "hash_algo": VLLM_HASH_ALGO,
                "hash_seed": serving.HASH_SEED,  # read when asked (the engine tests break it)
                "vllm": IMAGE_VLLM_VERSIONS.get(image_by_tag(image)),
                "image": image_content(image),  # the digest if given
                **model_kind_facts(endpoint),
            }
        )

    # ---- model kinds (issue 36) ----------------------------------------------------------------------------------
    # vLLM 0.32.0's OffloadingConnector copies whole KV blocks as the GPU holds them (any KV cache dtype; MLA's
    # MLAAttentionSpec is a layout it certifies: distributed/kv_transfer/kv_connector/v1/offloading/config.py), so
    # MLA with an FP8 cache is accepted: MLA (auto) and FP8 (GQA) are each run by tests/engine/test_model_kinds.py. It
    # implements SupportsHMA, so with a sliding-window model the hybrid KV cache manager stays on: the local layers
    # are a KV cache group of their own, stored as files `_g<group>` and loaded only over the window
    # (offloading/scheduler.py `load_window_size_in_chunks`), which neither kvtier's L2 accounting nor its engine
    # tests cover yet: refused, with LMCache (every layer of every token) as the alternative.

    def model_refusals(self, endpoint: Endpoint, model: Model) -> list[Refusal]:  # noqa: ARG002
        if model.local_layers:
            return [
                Refusal(
                    "cache.connector",
                    f"{model.id} has {model.local_layers} sliding-window layers: vLLM's connector keeps them in a "
                    "KV cache group of their own and loads only the window, which kvtier neither sizes nor tests",
                    "use connector: lmcache for this model (vLLM then stores every layer of every token)",
                )
            ]
        return []

    def file_unit(self, endpoint: Endpoint) -> FileUnit:
        """One vLLM block: its fs tier stores one file per full `--block-size` block (vllm/v1/kv_offload/
        file_mapper.py)."""
        return FileUnit(endpoint.block_size, "vLLM block")

    def image(self, endpoint: Endpoint) -> str:
        return endpoint.image or NATIVE_VLLM_IMAGE

    def offload_config(self, endpoint: Endpoint) -> dict[str, Any]:
        return vllm_offload_config(endpoint.cache, self.l2_subdir(endpoint))

    def standalone(self, endpoint: Endpoint) -> EngineWiring:
        """The block hash and `--kv-transfer-config`; /dev/shm also holds the CPU tier, one file there of `l1_gb`
        (`cpu_bytes_to_use`, vllm/v1/kv_offload/cpu/shared_offload_region.py; vLLM refuses to start when it does not
        fit)."""
        offload = self.offload_config(endpoint)
        return EngineWiring(
            args=(
                "--prefix-caching-hash-algo",
                VLLM_HASH_ALGO,
                "--kv-transfer-config",
                json.dumps(offload, separators=(",", ":"), sort_keys=True),
            ),
            shm_gib=math.ceil(endpoint.cache.l1_gb),
            rollout=offload,
        )

    def wiring_summary(self, endpoint: Endpoint) -> str:
        where = (
            f"fs tier {L2_MOUNT_PATH}/{self.l2_subdir(endpoint)}, L2 mounted"
            if endpoint.cache.l2 == "curvine"
            else "no L2"
        )
        return f"vLLM's OffloadingConnector, {where}, {pods.HASH_SEED_VAR}={HASH_SEED}, {VLLM_HASH_ALGO} block hashes"

    def pod_problems(self, endpoint: Endpoint, pod: Obj, container: Obj, configmaps: Sequence[Obj]) -> list[str]:  # noqa: ARG002
        """The pod's `--kv-transfer-config` is the one kvtier renders (connector, spec, CPU tier size, fs tier under
        the endpoint's current identity directory), its block hash and seed are the shared ones, and no LMCache
        setting is left over."""
        args = pods.argv(container)
        env = pods.env_entries(container)
        problems: list[str] = []
        configs = pods.flag_values(args, "--kv-transfer-config")
        wanted = self.offload_config(endpoint)
        if len(configs) != 1:
            problems.append(
                f"{len(configs)} --kv-transfer-config flags; exactly one (vLLM's OffloadingConnector) is needed"
            )
        else:
            try:
                found = json.loads(configs[0])
            except json.JSONDecodeError:
                found = None
            if found != wanted:
                problems.append(
                    f"--kv-transfer-config is {configs[0]}, not {json.dumps(wanted, sort_keys=True)} (the endpoint's "
                    "current identity directory; a pod from before the last change still uses the old one)"
                )
        algos = pods.flag_values(args, "--prefix-caching-hash-algo")
        if algos != [VLLM_HASH_ALGO]:
            problems.append(
                f"--prefix-caching-hash-algo is {algos or 'unset'}, not [{VLLM_HASH_ALGO!r}] (another hash names other "
                "files)"
            )
        leftovers = sorted({str(e.get("name")) for e in env if str(e.get("name", "")).startswith("LMCACHE_")})
        if leftovers:
            problems.append(f"LMCache settings on a pod of vLLM's connector: {', '.join(leftovers)}")
        if endpoint.cache.l2 == "curvine":
            problems += pods.mount_problems(pod, container)
        problems += pods.single_value(
            env, pods.HASH_SEED_VAR, HASH_SEED, "block hashes differ per pod and cross-pod hits are zero"
        )
        return problems

    def isolation_leak_cause(self, endpoint: Endpoint, key: str) -> str:  # noqa: ARG002
        """vLLM's block hash takes the salt into the first block and the adapter into every block's extra keys
        (docs/references.md "Issue 34"), and its fs tier names files by that hash."""
        return (
            f"vLLM's own block hash carries the {key} on every tier, so the pod does not run the engine kvtier rendered "
            "(another image, or a connector between vLLM and its tiers); run `kvtier verify`"
        )

    def probe_miss_cause(self, a_written: float, b_looked_up: float | None, loaded: bool) -> str:
        if not loaded:
            return (
                "no vllm:kv_offload_tiering_* series of the fs tier on the pods: vLLM's OffloadingConnector runs "
                "without the fs tier; check the --kv-transfer-config (run `kvtier verify`)"
            )
        if a_written <= 0:
            return (
                "pod A wrote nothing to its fs tier: the L2 mount is absent or read-only, or the prompt is shorter "
                "than one vLLM block (the fs tier stores full blocks only); run `kvtier verify`"
            )
        if not b_looked_up:
            return "pod B did not ask its OffloadingConnector for the prompt: its kv-transfer config is off"
        return (
            "pod B asked but read nothing from its fs tier although A wrote: the pods hash differently "
            "(PYTHONHASHSEED, --prefix-caching-hash-algo, --block-size, --model) or use different fs directories "
            "(root_dir, identity); run `kvtier verify`"
        )

    def probe_load_failure_cause(self, failures: float) -> str:
        """vLLM 0.32's fs tier reads with O_DIRECT whenever its start-up probe, one O_DIRECT write, passed
        (vllm/v1/kv_offload/tiering/fs/io.py `probe_o_direct`); it has no setting to read without it. A mount that
        takes O_DIRECT writes but fails O_DIRECT reads fails every load, and each hit is silently computed again."""
        return (
            f"pod B found the prompt in its fs tier but {failures:g} load job(s) failed "
            f"({OFFLOAD_TIER_PROMOTION_FAILURES}), so it computed the prompt again: every L2 hit is a recompute. "
            "vLLM's fs tier reads with O_DIRECT after probing it with a write only; check that the L2 mount serves "
            "O_DIRECT reads (the pod's log says 'block I/O failed' with the error; Curvine's FUSE does, docs/l2.md)"
        )


VLLM = VllmConnector()
