"""Fit: instance types offered in the region and present in a GPU group, weights and KV room on the GPU, tensor
parallelism, the L2 break-even, and host RAM of GPU nodes."""

from __future__ import annotations

from dataclasses import replace

from kvtier.catalog import INSTANCE_TYPES, MODELS, Model
from kvtier.config.curvine import memory_bytes
from kvtier.config.endpoint import MIN_MODEL_LEN
from kvtier.config.environment import Environment
from kvtier.errors import Problem
from kvtier.planner.gpu import gpu_budget
from kvtier.planner.host import PodMemory, node_memory, pod_memory, worst_packing
from kvtier.planner.tiers import endpoint_tiers
from kvtier.rules.context import Context, Findings, Site
from kvtier.sizing import lora_gib_per_gpu


def placement_problems(ctx: Context, site: Site) -> list[Problem]:
    e = site.endpoint
    problems: list[Problem] = []
    if ctx.env.region not in ctx.env.instance(e.instance_type).regions:
        problems.append(
            Problem(
                site.file,
                site.at("instance_type"),
                f"{e.instance_type} is not offered by HyperPod in {ctx.env.region} (cfn-lint's region list), the "
                f"region of {ctx.env_file}",
                f"use an instance type HyperPod offers in {ctx.env.region}, in the endpoint and in the gpu groups",
            )
        )
    gpu_types = sorted({g.instance_type for g in ctx.env.groups("gpu")})
    if e.instance_type not in gpu_types:
        problems.append(
            Problem(
                site.file,
                site.at("instance_type"),
                f"no gpu instance group of {ctx.env_file} has type {e.instance_type}, so its pods would never "
                "be scheduled",
                f"use one of the gpu groups' types ({', '.join(gpu_types)}) or add a gpu group of this type",
            )
        )
    return problems


def check_model_fits(ctx: Context, site: Site, model: Model, found: Findings) -> None:
    e = site.endpoint
    tp = e.tensor_parallel
    instance = ctx.env.instance(e.instance_type)
    if model.attention_heads % tp:
        found.errors.append(
            Problem(
                site.file,
                site.at("tensor_parallel"),
                f"{model.id} has {model.attention_heads} attention heads, which {tp} ranks cannot split evenly "
                "(vLLM refuses to start)",
                "use a tensor_parallel that divides the attention head count and the instance's GPU count",
            )
        )
        return
    if model.kv_heads % tp and tp % model.kv_heads:
        found.errors.append(
            Problem(
                site.file,
                site.at("tensor_parallel"),
                f"{model.id} has {model.kv_heads} KV heads: {tp} ranks neither split nor replicate them evenly",
                "use a tensor_parallel that divides the KV head count or is a multiple of it",
            )
        )
        return
    budget = gpu_budget(
        instance.gpu_spec, e.gpu_memory_utilization, model, tp, e.block_size, lora_gib_per_gpu(e, model)
    )
    if budget.kv_gib <= 0 < budget.kv_gib + budget.lora_gib:  # the weights fit, the adapter slots do not
        found.errors.append(
            Problem(
                site.file,
                site.at("lora.max_loras"),
                f"vLLM reserves {budget.lora_gib:.1f} GiB per GPU for {e.lora.max_loras} LoRA adapter slots of rank "
                f"{e.lora.max_lora_rank} on {model.id}, and {instance.gpu_spec.name} leaves "
                f"{budget.kv_gib + budget.lora_gib:.1f} GiB after the weights and the activation reserve: no room "
                "for KV",
                "lower lora.max_loras (adapters in one batch) or lora.max_lora_rank (to the largest adapter rank)",
            )
        )
        return
    if budget.kv_gib <= 0:
        need = smallest_tp_that_fits(ctx, site, model)
        found.errors.append(
            Problem(
                site.file,
                site.at("tensor_parallel"),
                f"{model.id} needs {budget.weights_gib:.1f} GiB of weights per GPU at tensor_parallel {tp}, and "
                f"{instance.gpu_spec.name} leaves {budget.usable_gib - budget.reserve_gib:.1f} GiB "
                f"({budget.memory_gib:g} GiB x gpu_memory_utilization {e.gpu_memory_utilization:g} - "
                f"{budget.reserve_gib:g} GiB activation reserve): the weights do not fit",
                fit_fixes(ctx, site, model, need),
            )
        )
        return
    if budget.tokens < e.max_model_len:
        # Below the shortest max_model_len kvtier accepts, lowering it cannot help: say what can.
        lower = f"lower max_model_len to at most {budget.tokens:,}, " if budget.tokens >= MIN_MODEL_LEN else ""
        found.errors.append(
            Problem(
                site.file,
                site.at("max_model_len"),
                f"after the weights, {instance.gpu_spec.name} keeps {budget.kv_gib:.2f} GiB of KV per GPU = "
                f"{budget.tokens:,} tokens, fewer than one max_model_len ({e.max_model_len:,}) prompt (vLLM refuses "
                f"to start; {model.id} stores {model.kv_bytes_per_token:,} bytes of KV per token)",
                f"{lower}raise gpu_memory_utilization, or raise tensor_parallel"
                + ("" if lower else f" (max_model_len cannot go below {MIN_MODEL_LEN})"),
            )
        )
        return
    tiers = endpoint_tiers(ctx.env, ctx.lobs, site.lob, e, model)
    if not tiers.has_l2:
        return
    break_even = tiers.l2_break_even_tokens()
    if break_even is None or break_even > e.max_model_len:
        when = "at no prompt length" if break_even is None else f"only above {break_even:,} tokens"
        found.warnings.append(
            Problem(
                site.file,
                site.at("cache.l2"),
                f"an L2 hit beats recomputing {when}, and prompts stop at max_model_len {e.max_model_len:,}: "
                f"a hit costs {tiers.l2_hit_fixed_s * 1000:.0f} ms plus its bytes at "
                f"{instance.l2_read_gbps or 0:.2f} GB/s, more than prefill on {tp} x {instance.gpu_spec.name} "
                "(kvtier plan shows both)",
                "use l2: none for this endpoint, a larger instance type (faster network), or measure and set "
                f"catalog_overrides.{e.instance_type}.l2_hit_fixed_s / l2_read_gbps / prefill_mfu if the catalog's "
                "estimates are off",
            )
        )


def fit_fixes(ctx: Context, site: Site, model: Model, need: int | None) -> str:
    """What would make the weights fit (issue 36): the model's FP8 checkpoint where kvtier knows one (or FP8 weights
    in general for a 16-bit model), tensor parallel on a type with that many GPUs, else a larger GPU."""
    e = site.endpoint
    fixes: list[str] = []
    if not model.format_spec.quantization:
        fp8 = MODELS.get(f"{model.id}-FP8")
        fp8_shape = fp8 or replace(model, weight_format="fp8")
        fp8_budget = gpu_budget(
            ctx.env.instance(e.instance_type).gpu_spec,
            e.gpu_memory_utilization,
            fp8_shape,
            e.tensor_parallel,
            e.block_size,
        )
        if fp8_budget.kv_gib > 0:
            name = (
                f"its FP8 checkpoint {fp8.id}"
                if fp8
                else "an FP8 checkpoint of it (kvtier's models entry with weight_format: fp8)"
            )
            fixes.append(f"serve {name} ({fp8_budget.weights_gib:.1f} GiB per GPU: it fits)")
    if need:
        types = [
            t.name for t in INSTANCE_TYPES.values() if t.gpu == ctx.env.instance(e.instance_type).gpu and t.gpus >= need
        ]
        fixes.append(f"use tensor_parallel {need} on an instance type with that many GPUs ({', '.join(types[:2])})")
    if not fixes:
        fixes.append("use a larger GPU")
    return "; or ".join(fixes) + ", or raise gpu_memory_utilization"


def smallest_tp_that_fits(ctx: Context, site: Site, model: Model) -> int | None:
    e = site.endpoint
    gpu = ctx.env.instance(e.instance_type).gpu_spec
    for tp in (1, 2, 4, 8):
        if (
            model.attention_heads % tp == 0
            and gpu_budget(gpu, e.gpu_memory_utilization, model, tp, e.block_size).kv_gib > 0
        ):
            return tp
    return None


def curvine_node_gib(env: Environment) -> float:
    """Curvine on every GPU node: the worker and the FUSE client at their memory limits (the most they may take)."""
    resources = env.curvine.resources
    return (memory_bytes(resources.worker.memory_limit) + memory_bytes(resources.fuse.memory_limit)) / 1024**3


def check_node_memory(ctx: Context, found: Findings) -> None:
    tiered = ctx.env.hyperpod.tiered_storage
    percent = tiered.memory_percent if tiered.enabled else None
    gpu_types = {g.instance_type for g in ctx.env.groups("gpu")}
    # Tiered Storage takes its share of every node of the cluster, system nodes too (API ClusterTieredStorageConfig).
    for type_name in sorted(gpu_types | {g.instance_type for g in ctx.env.groups("system")}):
        instance = ctx.env.instance(type_name)
        candidates: list[tuple[PodMemory, int]] = []
        where: dict[tuple[str, str], Site] = {}
        for site in ctx.sites():
            if site.endpoint.instance_type == type_name:
                candidates.append((pod_memory(site.lob.name, site.endpoint), site.endpoint.max_replicas))
                where[(site.lob.name, site.endpoint.name)] = site
        pods = worst_packing(instance.gpus, candidates)
        curvine = curvine_node_gib(ctx.env) if type_name in gpu_types else 0.0
        node = node_memory(type_name, instance.memory_gib, percent, pods, curvine_gib=curvine)
        if node.free_gib >= 0:
            continue
        problem = (
            f"a {type_name} node has {instance.memory_gib:g} GiB of RAM and its fullest packing pins "
            f"{node.pinned_gib:.1f} GiB: {node.breakdown()}"
        )
        over = -node.free_gib
        if pods:
            worst = max(pods, key=lambda p: p.l1_gib)
            site = where[(worst.lob, worst.endpoint)]
            found.errors.append(
                Problem(
                    site.file,
                    site.at("cache.l1_gb"),
                    problem,
                    f"lower cache.l1_gb to at most {max(worst.l1_gib - over, 0):.1f}, lower "
                    f"hyperpod.tiered_storage.memory_percent in {ctx.env_file}, or use an instance type with more RAM",
                )
            )
        else:
            found.errors.append(
                Problem(
                    ctx.env_file,
                    "hyperpod.tiered_storage.memory_percent",
                    problem,
                    "lower memory_percent so the node keeps room for vLLM and Curvine",
                )
            )
