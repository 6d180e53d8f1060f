"""The L2 pool: Curvine workers on the NVMe and masters on distinct nodes, the LOBs' budgets against the pool, what
each endpoint's L2 connector refuses, and endpoints that share a model but not a cache."""

from __future__ import annotations

from collections.abc import Mapping

from kvtier.catalog import GB, Model
from kvtier.config.curvine import DECIMAL_GB, NVME_USABLE_FRACTION, curvine_gb_bytes, max_worker_data_gb
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.connectors import connector_for
from kvtier.errors import Problem
from kvtier.planner.speed import speeds
from kvtier.rules.context import Context, Findings, Site
from kvtier.sizing import JANITOR_INTERVAL_SECONDS


def check_worker_fits(env: Environment, file: str = "") -> list[Problem]:
    """The worker data size against the NVMe of every GPU instance type (one worker per GPU node)."""
    problems: list[Problem] = []
    wanted = env.curvine.worker_data_gb
    for type_name in sorted({g.instance_type for g in env.groups("gpu")}):
        nvme_gb = env.instance(type_name).nvme_gb
        limit = max_worker_data_gb(nvme_gb)
        if wanted <= limit:
            continue
        if nvme_gb == 0:
            problem = f"{type_name} has no instance-store NVMe for the Curvine worker"
            allowed = "use GPU instance types with local NVMe (ml.g6e.*, ml.p5.48xlarge)"
        else:
            problem = (
                f"{wanted} GB (Curvine GB = GiB, {curvine_gb_bytes(wanted) / DECIMAL_GB:.0f} decimal GB) does not fit "
                f"the {nvme_gb} GB instance store of {type_name}, of which kvtier lets Curvine use "
                f"{NVME_USABLE_FRACTION:.0%}"
            )
            allowed = (
                f"use at most {limit} for {type_name}, or set catalog_overrides.{type_name}.nvme_gb if the catalog's "
                "unverified size is wrong (check `df -BG /opt/dlami/nvme` on a node)"
            )
        problems.append(Problem(file, "curvine.worker_data_gb", problem, allowed))
    return problems


def check_masters_fit(env: Environment, file: str = "") -> list[Problem]:
    """Masters need distinct system nodes (required anti-affinity)."""
    nodes = sum(g.count for g in env.groups("system"))
    if env.curvine.masters <= nodes:
        return []
    return [
        Problem(
            file,
            "curvine.masters",
            f"{env.curvine.masters} masters need {env.curvine.masters} distinct system nodes and the system groups "
            f"have {nodes}",
            "add system nodes (hyperpod.instance_groups, role system) or use fewer masters",
        )
    ]


def curvine_problems(env: Environment, file: str = "") -> list[Problem]:
    """Every Curvine check that needs the whole environment (for the loader's cross-checks)."""
    return check_worker_fits(env, file) + check_masters_fit(env, file)


def check_connector(site: Site, found: Findings) -> None:
    """What the endpoint's L2 connector cannot serve as configured, as it says (kvtier/connectors/: LMCache's chunks
    that do not line up with vLLM's blocks, vLLM's connector in operator mode or without its CPU tier, ...)."""
    for refusal in connector_for(site.endpoint).refusals(site.endpoint):
        found.errors.append(Problem(site.file, site.at(refusal.field), refusal.problem, refusal.fix))
    # One hash seed: every pod kvtier renders gets PYTHONHASHSEED=0 (kvtier/serving.py) and no endpoint setting
    # can change it, so the seed agrees by construction; the chart tests and `kvtier verify` check the pods.


def check_shared_model_ids(ctx: Context, lob: LineOfBusiness, found: Findings) -> None:
    """Each endpoint has its own L2 directory (design), so replicas of one endpoint always agree on TP, dtype,
    chunk size and seed by construction; two endpoints serving one model share nothing, which is worth saying."""
    seen: dict[str, int] = {}
    file = ctx.files.get(lob.name, lob.name)
    for index, e in enumerate(lob.endpoints):
        if e.cache.l2 == "none":
            continue
        first = seen.setdefault(e.model.id, index)
        if first != index:
            found.warnings.append(
                Problem(
                    file,
                    f"endpoints[{index}].model.id",
                    f"endpoints '{lob.endpoints[first].name}' and '{e.name}' both serve {e.model.id} but each has its "
                    "own L2 directory, so neither reads KV the other wrote",
                    "merge them into one endpoint (more replicas) if they should share their cache",
                )
            )


def pool_gb(ctx: Context) -> float:
    """Decimal GB the Curvine pool holds (budget_gb is decimal; worker_data_gb is Curvine GB = GiB)."""
    workers = sum(g.count for g in ctx.env.groups("gpu"))
    curvine = ctx.env.curvine
    return workers * (curvine.worker_data_gb - curvine.worker_reserved_gb) * 1024**3 / GB


def l2_write_gbps(ctx: Context, lob: LineOfBusiness, models: Mapping[tuple[str, int], Model]) -> float:
    """The most a LOB writes to L2: every replica prefilling short prompts flat out (KV bytes per token over prefill
    seconds per token, kvtier.planner.speed), e.g. 1.6 GB/s for Qwen3-8B on one L40S at the catalog's prefill MFU."""
    rate = 0.0
    for index, e in enumerate(lob.endpoints):
        model = models.get((lob.name, index))
        if e.cache.l2 != "curvine" or model is None:
            continue
        per_token = speeds(model, ctx.env.instance(e.instance_type), e.tensor_parallel).prefill_s_per_token
        if per_token > 0:
            rate += e.max_replicas * model.kv_bytes_per_token / per_token / GB
    return rate


def janitor_overshoot_gb(write_gbps: float) -> float:
    """How far a LOB can exceed its budget between two janitor decisions: what it writes in two intervals (a file
    written just after one listing is first counted by the next, which ends at most one more interval later, as long
    as a pass takes less than an interval)."""
    return write_gbps * 2 * JANITOR_INTERVAL_SECONDS


def check_l2_pool(ctx: Context, found: Findings, models: Mapping[tuple[str, int], Model] | None = None) -> None:
    users = [lob for lob in ctx.lobs if any(e.cache.l2 == "curvine" for e in lob.endpoints)]
    budget_gb = sum(lob.l2.budget_gb for lob in users)
    workers = sum(g.count for g in ctx.env.groups("gpu"))
    curvine = ctx.env.curvine
    pool = pool_gb(ctx)
    if budget_gb > pool:
        parts = ", ".join(f"{lob.name} {lob.l2.budget_gb:g}" for lob in users)
        found.errors.append(
            Problem(
                ctx.env_file,
                "curvine.worker_data_gb",
                f"the LOBs' L2 budgets add up to {budget_gb:,.1f} GB ({parts}) and the Curvine pool holds "
                f"{pool:,.1f} GB ({workers} GPU node workers x (worker_data_gb {curvine.worker_data_gb} - "
                f"worker_reserved_gb {curvine.worker_reserved_gb}) GiB)",
                "raise worker_data_gb (up to what the NVMe holds), add GPU nodes, or lower the LOBs' l2.budget_gb",
            )
        )
        return
    if models is None:
        return
    # Between two passes a LOB may overshoot its budget; only if every LOB's budget plus overshoot fits the pool can
    # no LOB, alone or with the others, fill it and fail every LOB's writes (docs/l2.md).
    peaks = {lob.name: lob.l2.budget_gb + janitor_overshoot_gb(l2_write_gbps(ctx, lob, models)) for lob in users}
    if sum(peaks.values()) <= pool:
        return
    parts = ", ".join(f"{lob.name} {lob.l2.budget_gb:g} + {peaks[lob.name] - lob.l2.budget_gb:,.0f}" for lob in users)
    found.warnings.append(
        Problem(
            ctx.env_file,
            "curvine.worker_data_gb",
            f"the LOBs' L2 budgets plus what each can write between two janitor passes ({2 * JANITOR_INTERVAL_SECONDS} s "
            f"at full prefill) add up to {sum(peaks.values()):,.1f} GB ({parts}) and the Curvine pool holds "
            f"{pool:,.1f} GB: under full load the pool can fill before the janitors catch up, and then every LOB's "
            "L2 writes fail",
            "lower the LOBs' l2.budget_gb by the overshoot, raise worker_data_gb, or add GPU nodes",
        )
    )
