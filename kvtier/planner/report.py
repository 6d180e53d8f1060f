"""The plan of one environment as plain data: what `kvtier plan --json` prints and the tables are drawn from."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvtier.catalog import GB, GIB, PLANNING_FACTS, REF_FLOPS
from kvtier.connectors import connector_for
from kvtier.planner.autoscaling import propose
from kvtier.planner.cost import (
    FIXED_SOURCES,
    NOT_PRICED,
    P5_RULE,
    P5_TYPE,
    SHARE_RULE,
    EnvCost,
    LobCost,
    Price,
    env_cost,
)
from kvtier.planner.gpu import gpu_budget
from kvtier.planner.shapes import endpoint_model
from kvtier.planner.speed import speeds
from kvtier.planner.tiers import endpoint_tiers, l2_share
from kvtier.planner.ttft import cold_ttft, l2_hit_ttft
from kvtier.sizing import lora_gib_per_gpu

if TYPE_CHECKING:
    from kvtier.config.endpoint import Endpoint
    from kvtier.config.loader import Config
    from kvtier.config.lob import LineOfBusiness
    from kvtier.planner.model import TierModel

RULES = {
    "l0": "per replica: GPU memory x gpu_memory_utilization - weights / tensor_parallel - gpu_reserve_gib, "
    "divided by the GPU's share of a token's KV, rounded down to whole vLLM blocks",
    "l1": "per replica: cache.l1_gb GiB (LMCache's unit; every L1 size is GiB) / KV bytes per token",
    "l2": "every L2 size is decimal GB; curvine: the LOB's l2.budget_gb split equally among its `l2: curvine` endpoints; tieredstorage: "
    "memory_percent of the GPU nodes' RAM split equally among the environment's tieredstorage endpoints",
    "l1_load": "chunk KV / tensor_parallel / the GPU's host-to-GPU bandwidth (each rank copies its shard)",
    "l2_load": "an L2 hit = its read (KV / l2_read_gbps, where l2_read_gbps = min(l2_network_efficiency x line "
    "rate, l2_fuse_cap_gbps): every L2 byte crosses the network, Curvine places chunks round-robin, never by "
    "locality with kvtier's manifests, and the node's concurrent L2 loads share its NIC) + l2_hit_fixed_s once per "
    "hit; single-flow bound: chunk KV / (single_flow_gbps / 8)",
    "ttft": "TTFT (decode excluded) = prefill of what no tier holds + L1 loads + the L2 read + the L2 hit overhead; "
    "an L2 hit of a prompt another replica prefilled finds its whole chunks (save_unfull_chunk false), at most "
    "N - 1 tokens (vLLM computes the last); plan and simulate share this model (kvtier/planner/ttft.py)",
    "recompute": "FLOPs(N) = 2 x params x N + 2 x layers x attention_heads x head_dim x N^2 (" + REF_FLOPS + "), "
    "at tensor_parallel x dense BF16 TFLOPS x prefill_mfu",
    "break_even": "the shortest prefix (whole chunks) whose L2 hit (fixed part + bytes, one reader) is faster "
    "than recomputing it; validate and simulate use the same model",
    "lob_share": SHARE_RULE,
    "p5": P5_RULE,
    "p5_kv": "KV a replica reaches: on its own type L0 + L1 (its own) + L2 (shared); on one ml.p5.48xlarge GPU "
    "(H100, same tensor_parallel and gpu_memory_utilization) only L0: P5 buys throughput, the tiers buy KV capacity",
    "fixed": "a kvtier-created environment: EKS control plane + interface endpoints x zones + NAT gateways, at list "
    "prices; an existing cluster's owner pays them",
    "month": "price per hour x hours_per_month",
}


def _price(price: Price) -> dict[str, Any]:
    return {
        "per_hour": round(price.per_hour, 4) if price.known else None,
        "per_month": round(price.per_month, 2) if price.known else None,
        "known_part_per_hour": round(price.per_hour, 4),
        "known_part_per_month": round(price.per_month, 2),
        "unknown": list(price.unknown),
    }


def _endpoint(config: Config, lob: LineOfBusiness, endpoint: Endpoint, prompt_tokens: int) -> dict[str, Any]:
    env = config.env
    model = endpoint_model(lob, endpoint, config.files.get(lob.name, lob.name))
    instance = env.instance(endpoint.instance_type)
    tp = endpoint.tensor_parallel
    tiers = endpoint_tiers(env, config.lobs, lob, endpoint, model)
    budget = gpu_budget(
        instance.gpu_spec,
        endpoint.gpu_memory_utilization,
        model,
        tp,
        endpoint.block_size,
        lora_gib_per_gpu(endpoint, model),
    )
    speed = speeds(model, instance, tp)
    share = l2_share(env, config.lobs, lob, endpoint)
    connector = connector_for(endpoint)
    unit = connector.file_unit(endpoint)  # one L2 file: LMCache's chunk, or a vLLM block (cache.connector: vllm)
    chunk = unit.tokens
    has_l2 = tiers.has_l2
    break_even = tiers.l2_break_even_tokens()
    if not has_l2:
        note = "no L2 for this endpoint"
    elif break_even is None:
        note = "an L2 hit never beats recomputing: L2 per-token load is slower than prefill at every length"
    elif break_even > endpoint.max_model_len:
        note = f"above max_model_len {endpoint.max_model_len}: L2 hits lose to recomputing for every allowed prompt"
    else:
        note = f"prefixes of {break_even} tokens or more load from L2 faster than they recompute"
    return {
        "lob": lob.name,
        "endpoint": endpoint.name,
        "mode": endpoint.mode,
        "routing": endpoint.routing,
        "model": {
            "id": model.id,
            "params_billion": model.params_billion,
            "layers": model.layers,
            "attention_heads": model.attention_heads,
            "kv_heads": model.kv_heads,
            "head_dim": model.head_dim,
            "dtype": model.dtype,
            "source": model.source,
            # Issue 36: what the planner computes with.
            "active_params_billion": model.active_params / 1e9,
            "computed_params_billion": model.computed_params / 1e9,
            "weight_format": model.format,
            "attention": model.attention,
            "kv_cache_dtype": model.kv_cache_dtype,
        },
        "instance_type": endpoint.instance_type,
        "tensor_parallel": tp,
        "replicas": endpoint.replicas,
        "max_replicas": endpoint.max_replicas,
        "max_model_len": endpoint.max_model_len,
        "weights": {"gib": model.weight_bytes / GIB, "gib_per_gpu": budget.weights_gib},
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "chunk": {
            "tokens": chunk,
            "bytes": connector.l2_file_bytes(endpoint, model),
            "unit": unit.title,
        },
        "l0": {
            "tokens_per_replica": tiers.l0_tokens,
            "gpu_gib": budget.memory_gib,
            "usable_gib_per_gpu": budget.usable_gib,
            "reserve_gib_per_gpu": budget.reserve_gib,
            "kv_gib_per_gpu": budget.kv_gib,
        },
        "l1": {"gib_per_replica": endpoint.cache.l1_gb, "tokens_per_replica": tiers.l1_tokens},
        "l2": {"backend": share.backend, "gb": share.bytes / GB, "tokens": tiers.l2_tokens, "rule": share.rule},
        "load": {
            "h2d_gbps": instance.gpu_spec.host_to_gpu_gbps,
            "l1_chunk_s": tiers.l1_load_seconds(chunk),
            "l2_read_gbps": speed.l2_read_gbps if has_l2 else None,
            "l2_hit_fixed_s": tiers.l2_hit_fixed_s if has_l2 else None,
            "l2_chunk_s": tiers.l2_load_seconds(chunk) if has_l2 else None,  # fixed part + the chunk's bytes
            "l2_chunk_s_single_flow": speed.l2_single_flow_s_per_token * chunk if has_l2 else None,
        },
        "recompute": {
            "tokens": prompt_tokens,
            "seconds": cold_ttft(tiers, prompt_tokens).total_s,
            "effective_tflops": speed.prefill_tflops,
            "prefill_mfu": instance.prefill_mfu,
        },
        "l2_hit": _l2_hit(tiers, prompt_tokens) if has_l2 else None,
        "break_even_tokens": break_even,
        "break_even_note": note,
        "autoscaling": _autoscaling(lob, endpoint, tiers, prompt_tokens, env.observability.ttft_p90_slo_ms / 1000),
        **({"adapters": _adapters(endpoint, tiers, share.bytes, budget.lora_gib)} if endpoint.adapters else {}),
    }


def _adapters(endpoint: Endpoint, tiers: TierModel, l2_bytes: float, lora_gib: float) -> dict[str, Any]:
    """LoRA adapters split the cache (issue 35): each adapter's KV and the base model's are keyed apart on every tier,
    so with traffic spread evenly over them each gets 1 / (adapters + 1) of L1 and L2 (`kvtier simulate` with the
    trace's `adapter` field measures the real split)."""
    shares = len(endpoint.adapters) + 1
    return {
        "names": [a.name for a in endpoint.adapters],
        "key_spaces": shares,
        "lora_gib_per_gpu": lora_gib,
        "l1_gib_per_share": endpoint.cache.l1_gb / shares,
        "l1_tokens_per_share": tiers.l1_tokens // shares,
        "l2_gb_per_share": l2_bytes / GB / shares,
        "l2_tokens_per_share": tiers.l2_tokens // shares,
    }


def _autoscaling(
    lob: LineOfBusiness, endpoint: Endpoint, tiers: TierModel, prompt_tokens: int, slo_s: float
) -> list[dict[str, Any]]:
    """kvtier's proposal for each autoscaling setting, beside what the endpoint configures (None: not set)."""
    configured: dict[str, float] = {}
    if endpoint.autoscaling is not None:
        configured = {
            "min_replicas": endpoint.autoscaling.min_replicas,
            "max_replicas": endpoint.autoscaling.max_replicas,
        }
        for trigger in endpoint.autoscaling.all_triggers:
            if trigger.type == "signal":
                configured[trigger.signal] = trigger.target
    return [
        {"setting": p.name, "proposed": p.value, "configured": configured.get(p.name), "why": p.why}
        for p in propose(lob, endpoint, tiers, prompt_tokens, slo_s)
    ]


def _l2_hit(tiers: TierModel, prompt_tokens: int) -> dict[str, Any]:
    """The prompt read from L2 by a replica that holds none of it (another replica prefilled it): TTFT in parts."""
    hit = l2_hit_ttft(tiers, prompt_tokens)
    return {
        "tokens": prompt_tokens,
        "read_tokens": round(hit.l2_read_s / tiers.l2_load_s_per_token) if hit.l2_read_s else 0,
        "read_seconds": hit.l2_read_s,
        "overhead_seconds": hit.l2_overhead_s,
        "prefill_seconds": hit.prefill_s,
        "ttft_seconds": hit.total_s,
        "speedup": cold_ttft(tiers, prompt_tokens).total_s / hit.total_s,
    }


def _lob(cost: LobCost) -> dict[str, Any]:
    per_h100 = cost.price.per_hour / cost.h100_gpus if cost.price.known and cost.h100_gpus > 0 else None
    return {
        "name": cost.name,
        "gpus": cost.gpus,
        "max_gpus": cost.max_gpus,
        "gpu_quota": cost.gpu_quota,
        "nodes": cost.nodes,
        "price": _price(cost.price),
        "p5": {
            "h100_gpus": cost.h100_gpus,
            "instances": cost.p5_instances,
            "price": _price(cost.p5_price),
            # What this LOB pays per hour of H100-equivalent throughput on its own GPUs (compare with P5's per GPU).
            "price_per_h100_equivalent_hour": round(per_h100, 4) if per_h100 is not None else None,
        },
    }


def _environment(config: Config, cost: EnvCost) -> dict[str, Any]:
    env = config.env
    p5 = env.instance(P5_TYPE)
    return {
        "name": env.name,
        "region": env.region,
        "groups": [
            {
                "name": g.name,
                "role": g.role,
                "instance_type": g.instance_type,
                "count": g.count,
                "gpus_per_node": g.gpus,
                "price_per_node_hour": env.instance(g.instance_type).price_per_hour,
                "price_source": env.instance(g.instance_type).sources.get("price_per_hour"),
                "price_as_of": env.instance(g.instance_type).price_as_of,
                "price": _price(g.price),
            }
            for g in cost.groups
        ],
        "gpus": cost.gpus,
        "gpu_nodes": cost.gpu_nodes,
        "allocated_gpus": cost.allocated_gpus,
        "gpu_price": _price(cost.gpu_price),
        "system_price": _price(cost.system_price),
        "unallocated_gpu_price": _price(cost.unallocated_price),
        "fixed": [
            {
                "name": f.name,
                "count": f.count,
                "unit": f.unit,
                "price_per_unit_hour": f.unit_price,
                "price": _price(f.price),
            }
            for f in cost.fixed
        ],
        "fixed_price": _price(cost.fixed_price),
        "fixed_sources": list(FIXED_SOURCES) if cost.fixed else [],
        "not_priced": NOT_PRICED,
        "total_price": _price(cost.total),
        "p5": {
            "instance_type": P5_TYPE,
            "price_per_node_hour": p5.price_per_hour,
            "price_per_gpu_hour": p5.price_per_hour / p5.gpus if p5.price_per_hour is not None else None,
            "h100_gpus": cost.h100_gpus,
            "instances": cost.p5_instances,
            "price": _price(cost.p5_price),
            "total_price": _price(cost.total_on_p5),
            "kv": _p5_kv(config),
        },
    }


def _p5_kv(config: Config) -> list[dict[str, Any]]:
    """The KV-capacity reason P5 was bought and the tiers replace: per endpoint, the prefix tokens one replica can
    reach on its own type (L0 + L1 + the shared L2) and on P5's H100 (L0 only), at the same settings."""
    gpu = config.env.instance(P5_TYPE).gpu_spec
    rows = []
    for lob in config.lobs:
        for endpoint in lob.endpoints:
            model = endpoint_model(lob, endpoint, config.files.get(lob.name, lob.name))
            tiers = endpoint_tiers(config.env, config.lobs, lob, endpoint, model)
            on_p5 = gpu_budget(
                gpu, endpoint.gpu_memory_utilization, model, endpoint.tensor_parallel, endpoint.block_size
            ).tokens
            rows.append(
                {
                    "lob": lob.name,
                    "endpoint": endpoint.name,
                    "instance_type": endpoint.instance_type,
                    "tokens": tiers.l0_tokens + tiers.l1_tokens + tiers.l2_tokens,
                    "tokens_on_p5": on_p5,
                }
            )
    return rows


def caveats(config: Config) -> list[str]:
    """One line per family of shown numbers that rests on a catalog fact no primary source confirms, naming it."""
    env = config.env
    priced = sorted({g.instance_type for g in (*env.groups("system"), *env.groups("gpu"))} | {P5_TYPE})
    endpoint_types = sorted({e.instance_type for lob in config.lobs for e in lob.endpoints})
    gpu_types = sorted({*{g.instance_type for g in env.groups("gpu")}, P5_TYPE})
    lines = []
    prices = [t for t in priced if "price_per_hour" in env.instance(t).unverified]
    if prices:
        lines.append("the dollar figures rest on unverified prices (price_per_hour) of " + ", ".join(prices))
    tflops = sorted(
        {
            f"{env.instance(t).gpu_spec.name} bf16_dense_tflops"
            for t in gpu_types
            if "bf16_dense_tflops" in env.instance(t).gpu_spec.unverified
        }
    )
    h100 = env.instance(P5_TYPE)
    p5_facts = [f"{P5_TYPE} price_per_hour"] if "price_per_hour" in h100.unverified else []
    lines.append(
        "the P5 comparison assumes equal dense BF16 throughput is equal serving capacity (prefill-bound work)"
        + (" and rests on " + ", ".join(p5_facts + tflops) if p5_facts or tflops else "")
    )
    speed_facts = sorted(
        f"{t} {fact}"
        for t in endpoint_types
        for fact in ("prefill_mfu", "l2_read_gbps", "l2_hit_fixed_s")
        if fact in env.instance(t).unverified
    )
    if speed_facts:
        lines.append("load and recompute times and the L2 break-even rest on estimates: " + ", ".join(speed_facts))
    return lines


def build_plan(config: Config, prompt_tokens: int = 4096) -> dict[str, Any]:
    """Everything `kvtier plan` shows, as JSON-ready data."""
    endpoints = [_endpoint(config, lob, e, prompt_tokens) for lob in config.lobs for e in lob.endpoints]
    cost = env_cost(config.env, config.lobs)
    return {
        "units": {"l1": "GiB", "l2": "GB", "rates": "GB/s", "times": "s", "prices": "USD"},
        "environment": _environment(config, cost),
        "endpoints": endpoints,
        "lobs": [_lob(c) for c in cost.lobs],
        "caveats": caveats(config),
        "rules": RULES,
        "assumptions": {name: asdict(fact) for name, fact in PLANNING_FACTS.items()},
        "warnings": [str(w) for w in config.warnings],
    }
