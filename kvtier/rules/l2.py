"""The L2 pool: Curvine workers on the NVMe and masters on distinct nodes, the LOBs' budgets against the pool, chunks
that line up with vLLM blocks, and endpoints that share a model but not a cache."""

from __future__ import annotations

from kvtier.catalog import GB
from kvtier.config.curvine import DECIMAL_GB, NVME_USABLE_FRACTION, curvine_gb_bytes, max_worker_data_gb
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings, Site


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


def check_chunk_alignment(site: Site, found: Findings) -> None:
    e = site.endpoint
    if e.cache.chunk_size % e.block_size:
        found.errors.append(
            Problem(
                site.file,
                site.at("cache.chunk_size"),
                f"{e.cache.chunk_size} is not a multiple of the vLLM block size {e.block_size}: LMCache chunks "
                "would not line up with vLLM's blocks",
                f"use a multiple of {e.block_size}, like 256",
            )
        )
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


def check_l2_pool(ctx: Context, found: Findings) -> None:
    users = [lob for lob in ctx.lobs if any(e.cache.l2 == "curvine" for e in lob.endpoints)]
    budget_gb = sum(lob.l2.budget_gb for lob in users)
    workers = sum(g.count for g in ctx.env.groups("gpu"))
    # budget_gb is decimal GB (what the janitor counts); worker_data_gb is Curvine GB = GiB (kvtier.config.curvine).
    curvine = ctx.env.curvine
    pool_gb = workers * (curvine.worker_data_gb - curvine.worker_reserved_gb) * 1024**3 / GB
    if budget_gb <= pool_gb:
        return
    parts = ", ".join(f"{lob.name} {lob.l2.budget_gb:g}" for lob in users)
    found.errors.append(
        Problem(
            ctx.env_file,
            "curvine.worker_data_gb",
            f"the LOBs' L2 budgets add up to {budget_gb:,.1f} GB ({parts}) and the Curvine pool holds {pool_gb:,.1f} GB "
            f"({workers} GPU node workers x (worker_data_gb {curvine.worker_data_gb} - worker_reserved_gb "
            f"{curvine.worker_reserved_gb}) GiB)",
            "raise worker_data_gb (up to what the NVMe holds), add GPU nodes, or lower the LOBs' l2.budget_gb",
        )
    )
