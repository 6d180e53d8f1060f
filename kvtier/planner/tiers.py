"""One endpoint's tiers as a TierModel: L0 (GPU), L1 (LMCache host DRAM), L2 (its share of the shared pool)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.catalog import GB, GIB, Model
from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.connectors import connector_for, l2_read_share
from kvtier.errors import UsageError
from kvtier.planner.gpu import gpu_budget
from kvtier.planner.model import TierModel
from kvtier.planner.shapes import endpoint_model
from kvtier.planner.speed import speeds
from kvtier.sizing import lora_gib_per_gpu

if TYPE_CHECKING:
    from kvtier.config.loader import Config

# Largest override of a size (and of replicas): an exabyte, beyond any deployment, and small enough that byte and
# token counts stay finite (1e300 GB would overflow a float).
OVERRIDE_MAX_GB = 1e9
L2_SHARE_RULES = {
    "curvine": "the LOB's l2.budget_gb split equally among its `l2: curvine` endpoints",
    "tieredstorage": "HyperPod Tiered Storage (memory_percent of every GPU node's RAM) split equally among the "
    "environment's `l2: tieredstorage` endpoints",
    "none": "no L2",
}


@dataclass(frozen=True)
class L2Share:
    backend: str
    bytes: float
    rule: str


def l2_share(env: Environment, lobs: Sequence[LineOfBusiness], lob: LineOfBusiness, endpoint: Endpoint) -> L2Share:
    """The L2 bytes planned for this endpoint (the janitor enforces the LOB's budget, not per-endpoint shares)."""
    backend = endpoint.cache.l2
    if backend == "curvine":
        sharers = sum(1 for e in lob.endpoints if e.cache.l2 == "curvine")
        return L2Share(backend, lob.l2.budget_gb * GB / sharers, L2_SHARE_RULES[backend])
    if backend == "tieredstorage":
        tiered = env.hyperpod.tiered_storage
        pool = 0.0
        if tiered.enabled:
            for group in env.groups("gpu"):
                pool += group.count * env.instance(group.instance_type).memory_gib * GIB * tiered.memory_percent / 100
        sharers = sum(1 for other in lobs for e in other.endpoints if e.cache.l2 == "tieredstorage")
        return L2Share(backend, pool / max(sharers, 1), L2_SHARE_RULES[backend])
    return L2Share(backend, 0.0, L2_SHARE_RULES[backend])


def endpoint_tiers(
    env: Environment,
    lobs: Sequence[LineOfBusiness],
    lob: LineOfBusiness,
    endpoint: Endpoint,
    model: Model,
    *,
    replicas: int | None = None,
    l1_gib: float | None = None,
    l2_gb: float | None = None,
) -> TierModel:
    """The TierModel of one endpoint; the overrides replace the config's replicas, L1 (GiB) and L2 share (GB)."""
    instance = env.instance(endpoint.instance_type)
    tp = endpoint.tensor_parallel
    kv = model.kv_bytes_per_token
    budget = gpu_budget(
        instance.gpu_spec,
        endpoint.gpu_memory_utilization,
        model,
        tp,
        endpoint.block_size,
        lora_gib_per_gpu(endpoint, model),
    )
    speed = speeds(model, instance, tp)
    l1_bytes = (endpoint.cache.l1_gb if l1_gib is None else l1_gib) * GIB  # cache.l1_gb is GiB (LMCache's unit)
    # L1 (`l1_gb`, per replica) is split over the replica's TP ranks, one LMCache engine each (kvtier/connectors/lmcache.py).
    # Every rank stores the same chunks, each with only its own KV heads (LMCache's kv_shape uses vLLM's per-GPU
    # head count), so the replica's L1 holds (l1 / tp) / (per-rank bytes per token) tokens: l1 / kv_bytes_per_token
    # when the KV heads divide evenly, fewer when TP exceeds the KV heads and ranks hold copies of a head.
    l1_tokens = int(l1_bytes / tp // budget.kv_bytes_per_token)
    share = l2_share(env, lobs, lob, endpoint)
    l2_bytes = share.bytes if l2_gb is None or share.backend == "none" else l2_gb * GB
    connector = connector_for(endpoint)
    unit = connector.file_unit(endpoint)  # LMCache's chunk, or vLLM's block on its own connector
    # The network model's rate at the connector's measured efficiency for these files (docs/planning.md).
    l2_s_per_token = speed.l2_s_per_token / l2_read_share(endpoint, model)
    return TierModel(
        kv_bytes_per_token=kv,
        chunk_tokens=unit.tokens,
        chunk_unit=unit.title,
        block_tokens=endpoint.block_size,
        replicas=endpoint.replicas if replicas is None else replicas,
        l0_tokens=budget.tokens,
        l1_tokens=l1_tokens,
        # Whole files, each its tokens' KV and the connector's header (the janitor deletes whole files).
        l2_tokens=int(l2_bytes // connector.l2_file_bytes(endpoint, model)) * unit.tokens,
        l1_load_s_per_token=speed.l1_s_per_token,
        l2_load_s_per_token=l2_s_per_token if share.backend != "none" else float("inf"),
        prefill_s_per_token=speed.prefill_s_per_token,
        prefill_s_per_token_squared=speed.prefill_s_per_token_squared,
        max_model_len=endpoint.max_model_len,
        l2_hit_fixed_s=speed.l2_hit_fixed_s,
        forward_floor_s=speed.forward_floor_s,
        replicas_per_node=max(instance.gpus // tp, 1),
    )


def find_endpoint(config: Config, lob: str, endpoint: str) -> tuple[LineOfBusiness, Endpoint]:
    """The LOB and endpoint named, or a UsageError listing what exists."""
    by_name = {item.name: item for item in config.lobs}
    if lob not in by_name:
        known = ", ".join(by_name) or "none"
        raise UsageError(f"environment '{config.env.name}' runs no line of business '{lob}'; it runs: {known}")
    found = by_name[lob]
    for item in found.endpoints:
        if item.name == endpoint:
            return found, item
    known = ", ".join(e.name for e in found.endpoints)
    raise UsageError(f"line of business '{lob}' has no endpoint '{endpoint}'; its endpoints: {known}")


def tier_model(
    config: Config,
    lob: str,
    endpoint: str,
    *,
    replicas: int | None = None,
    l1_gib: float | None = None,
    l2_gb: float | None = None,
) -> TierModel:
    """The tier model of `lob`/`endpoint` in a loaded config (overrides as used by `kvtier simulate`)."""
    for name, value in (("replicas", replicas), ("l1_gib", l1_gib), ("l2_gb", l2_gb)):
        low = 1 if name == "replicas" else 0
        if value is not None and not (math.isfinite(value) and low <= value <= OVERRIDE_MAX_GB):
            raise UsageError(f"{name} override {value} is out of range; use a number from {low} to {OVERRIDE_MAX_GB:g}")
    found_lob, found = find_endpoint(config, lob, endpoint)
    model = endpoint_model(found_lob, found, config.files.get(found_lob.name, f"lobs/{found_lob.name}.yaml"))
    return endpoint_tiers(
        config.env, config.lobs, found_lob, found, model, replicas=replicas, l1_gib=l1_gib, l2_gb=l2_gb
    )
