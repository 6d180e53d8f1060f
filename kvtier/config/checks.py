"""Cross-checks on a whole environment (env file + its LOB files), run by the loader before any construct is built.

Each check returns problems: errors stop `cdk synth` and `kvtier validate` (exit 2); warnings are printed (exit 0).
Checks of one file's own fields live in its model; here is what needs several files, the catalog or the planner.
The rules and their sources are in the README section "Plan capacity and cost" (/work/notes/readme-planner.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kvtier.catalog import GB, MODELS, Model
from kvtier.config.curvine import curvine_problems, memory_bytes
from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.config.hyperpod import InstanceGroup
from kvtier.config.lob import LineOfBusiness
from kvtier.errors import ConfigError, Problem
from kvtier.planner.gpu import gpu_budget
from kvtier.planner.host import PodMemory, node_memory, pod_memory, worst_packing
from kvtier.planner.shapes import endpoint_model
from kvtier.planner.tiers import endpoint_tiers
from kvtier.versions import ROUTER_LMCACHE_VERSION, STANDALONE_LMCACHE_VERSION


@dataclass(frozen=True)
class Site:
    """One endpoint and where it is written."""

    lob: LineOfBusiness
    file: str
    index: int
    endpoint: Endpoint

    def at(self, path: str) -> str:
        return f"endpoints[{self.index}].{path}"

    @property
    def label(self) -> str:
        return f"{self.lob.name}/{self.endpoint.name}"


@dataclass
class Findings:
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    env: Environment
    env_file: str
    lobs: tuple[LineOfBusiness, ...]
    files: Mapping[str, str]

    def sites(self) -> Iterator[Site]:
        for lob in self.lobs:
            for index, endpoint in enumerate(lob.endpoints):
                yield Site(lob, self.files.get(lob.name, f"lobs/{lob.name}.yaml"), index, endpoint)

    def group_path(self, group: InstanceGroup) -> str:
        """Where a GPU group is written: kvtier's own groups or an existing cluster's."""
        hyperpod = self.env.hyperpod
        if hyperpod.existing is None:
            return f"hyperpod.instance_groups[{hyperpod.instance_groups.index(group)}]"
        names = [g.name for g in hyperpod.existing.nodes.gpu.groups]
        return f"hyperpod.existing.nodes.gpu.groups[{names.index(group.name)}]"

    def gpu_supply(self) -> dict[str, int]:
        """GPUs per instance type in the GPU groups."""
        supply: dict[str, int] = {}
        for group in self.env.groups("gpu"):
            gpus = group.count * self.gpus(group.instance_type)
            supply[group.instance_type] = supply.get(group.instance_type, 0) + gpus
        return supply

    def gpus(self, instance_type: str) -> int:
        return self.env.instance(instance_type).gpus

    def gpu_demand(self) -> dict[str, int]:
        """GPUs per instance type that every endpoint holds at its maximum replicas."""
        demand: dict[str, int] = {}
        for site in self.sites():
            e = site.endpoint
            demand[e.instance_type] = demand.get(e.instance_type, 0) + e.max_replicas * e.tensor_parallel
        return demand


def cross_check(
    env: Environment, env_file: str, lobs: Mapping[str, LineOfBusiness], lob_files: Mapping[str, str]
) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) for the environment as a whole."""
    ctx = Context(env, env_file, tuple(lobs[name] for name in env.lobs if name in lobs), lob_files)
    found = Findings()
    found.errors.extend(curvine_problems(env, env_file))
    models = _models(ctx, found)
    for site in ctx.sites():
        placement = _placement(ctx, site)
        found.errors.extend(placement)
        _agreement(site, found)
        _routing(site, found)
        _tiered_storage(ctx, site, found)
        model = models.get((site.lob.name, site.index))
        if model is not None and not placement:
            _model_fits(ctx, site, model, found)
    for lob in ctx.lobs:
        _quota(ctx, lob, found)
        _shared_model_ids(ctx, lob, found)
    _gpu_groups(ctx, found)
    _node_memory(ctx, found)
    _l2_pool(ctx, found)
    _rolling_updates(ctx, found)
    return found.errors, found.warnings


# --- Models -------------------------------------------------------------------------------------------------------


def _models(ctx: Context, found: Findings) -> dict[tuple[str, int], Model]:
    """Every endpoint's model shape (catalog or LOB file); unknown ones are errors and skip the checks that need them."""
    models: dict[tuple[str, int], Model] = {}
    for site in ctx.sites():
        try:
            models[(site.lob.name, site.index)] = endpoint_model(site.lob, site.endpoint, site.file)
        except ConfigError as err:
            found.errors.extend(err.problems)
    for lob in ctx.lobs:
        file = ctx.files.get(lob.name, lob.name)
        for model_id, shape in lob.models.items():
            known = MODELS.get(model_id)
            if known is None:
                continue
            ours = (shape.layers, shape.attention_heads, shape.kv_heads, shape.head_dim, shape.params_billion)
            theirs = (known.layers, known.attention_heads, known.kv_heads, known.head_dim, known.params_billion)
            if ours != theirs or shape.dtype != known.dtype:
                catalog = (
                    f"{known.layers} layers, {known.attention_heads} attention heads, {known.kv_heads} KV heads, "
                    f"head dim {known.head_dim}, {known.params_billion} B parameters, {known.dtype}"
                )
                found.warnings.append(
                    Problem(
                        file,
                        f"models.{model_id}",
                        f"differs from kvtier's catalog entry ({catalog}); this file's description is used",
                        "remove it to use the catalog's, or keep it if it matches your checkpoint's config.json",
                    )
                )
    return models


# --- Placement: instance types, regions, GPU groups ---------------------------------------------------------------


def _placement(ctx: Context, site: Site) -> list[Problem]:
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


# --- Model fit: weights, KV room, tensor parallelism, L2 break-even -----------------------------------------------


def _model_fits(ctx: Context, site: Site, model: Model, found: Findings) -> None:
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
    budget = gpu_budget(instance.gpu_spec, e.gpu_memory_utilization, model, tp, e.block_size)
    if budget.kv_gib <= 0:
        need = _smallest_tp_that_fits(ctx, site, model)
        found.errors.append(
            Problem(
                site.file,
                site.at("tensor_parallel"),
                f"{model.id} needs {budget.weights_gib:.1f} GiB of weights per GPU at tensor_parallel {tp}, and "
                f"{instance.gpu_spec.name} leaves {budget.usable_gib - budget.reserve_gib:.1f} GiB "
                f"({budget.memory_gib:g} GiB x gpu_memory_utilization {e.gpu_memory_utilization:g} - "
                f"{budget.reserve_gib:g} GiB activation reserve): the weights do not fit",
                (f"use tensor_parallel {need} on an instance type with that many GPUs" if need else "use a larger GPU")
                + ", or raise gpu_memory_utilization",
            )
        )
        return
    if budget.tokens < e.max_model_len:
        found.errors.append(
            Problem(
                site.file,
                site.at("max_model_len"),
                f"after the weights, {instance.gpu_spec.name} keeps {budget.kv_gib:.2f} GiB of KV per GPU = "
                f"{budget.tokens:,} tokens, fewer than one max_model_len ({e.max_model_len:,}) prompt (vLLM refuses "
                "to start)",
                f"lower max_model_len to at most {budget.tokens:,}, raise gpu_memory_utilization, or raise "
                "tensor_parallel",
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
                f"loading KV from L2 at {instance.l2_read_gbps or 0:.2f} GB/s is slower than prefill on "
                f"{tp} x {instance.gpu_spec.name} (kvtier plan shows both)",
                "use l2: none for this endpoint, a larger instance type (faster network), or measure and set "
                f"catalog_overrides.{e.instance_type}.l2_read_gbps / prefill_mfu if the catalog's estimates are off",
            )
        )


def _smallest_tp_that_fits(ctx: Context, site: Site, model: Model) -> int | None:
    e = site.endpoint
    gpu = ctx.env.instance(e.instance_type).gpu_spec
    for tp in (1, 2, 4, 8):
        if (
            model.attention_heads % tp == 0
            and gpu_budget(gpu, e.gpu_memory_utilization, model, tp, e.block_size).kv_gib > 0
        ):
            return tp
    return None


# --- What must agree across pods and tiers ------------------------------------------------------------------------


def _agreement(site: Site, found: Findings) -> None:
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
    # One hash seed: every pod kvtier renders gets PYTHONHASHSEED=0 (kvtier/k8s/lmcache.py) and no endpoint setting
    # can change it, so the seed agrees by construction; the chart tests and `kvtier verify` check the pods.


def _shared_model_ids(ctx: Context, lob: LineOfBusiness, found: Findings) -> None:
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


# --- Routing strategies and modes ---------------------------------------------------------------------------------


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _routing(site: Site, found: Findings) -> None:
    e = site.endpoint
    if e.routing != "kvaware":
        return
    if e.mode == "standalone":
        reason = (
            "the production-stack router embeds the LMCache controller of lmcache "
            f"{ROUTER_LMCACHE_VERSION}, whose protocol changed in 0.4 (registration of a newer engine is expected to "
            "fail, /work/notes/vllm-lmcache-router.md 3.6); kvaware also tokenizes only `prompt`, not chat messages"
        )
        if e.image is None and _minor(STANDALONE_LMCACHE_VERSION) != _minor(ROUTER_LMCACHE_VERSION):
            found.errors.append(
                Problem(
                    site.file,
                    site.at("routing"),
                    f"kvaware with the default standalone image (LMCache {STANDALONE_LMCACHE_VERSION}) would not "
                    f"route by cache: {reason}",
                    "use prefixaware or session in standalone mode, mode: operator, or an `image` whose LMCache is "
                    f"{_minor(ROUTER_LMCACHE_VERSION)}.x",
                )
            )
        else:
            found.warnings.append(
                Problem(
                    site.file,
                    site.at("routing"),
                    f"kvaware works only if the image's LMCache is {_minor(ROUTER_LMCACHE_VERSION)}.x: {reason}",
                    "check `pip show lmcache` in the image, or use prefixaware",
                )
            )
        return
    found.warnings.append(
        Problem(
            site.file,
            site.at("routing"),
            "kvaware matches cached tokens of /v1/completions prompts only; chat requests fall back to session or "
            "load routing (production-stack code; third-party reports say the same of the operator's router)",
            "use prefixaware if clients send chat completions",
        )
    )


def _tiered_storage(ctx: Context, site: Site, found: Findings) -> None:
    e = site.endpoint
    if ctx.env.hyperpod.tiered_storage.enabled:
        return
    if e.cache.l2 == "tieredstorage":
        why = "the tieredstorage L2 is HyperPod's Tiered Storage"
    elif e.cache.l2 == "curvine" and e.mode == "operator":
        why = (
            "in operator mode a Curvine L2 is declared with the placeholder backend `tieredstorage`, which the "
            "operator accepts only when Tiered Storage is on (then Kyverno rewires it to Curvine)"
        )
    else:
        return
    found.errors.append(
        Problem(
            site.file,
            site.at("cache.l2"),
            f"{why}, and {ctx.env_file} has hyperpod.tiered_storage.enabled: false",
            f"set hyperpod.tiered_storage.enabled: true in {ctx.env_file}, use mode: standalone, or l2: none",
        )
    )


# --- GPUs: quotas and groups --------------------------------------------------------------------------------------


def _quota(ctx: Context, lob: LineOfBusiness, found: Findings) -> None:
    need = sum(e.max_replicas * e.tensor_parallel for e in lob.endpoints)
    if need <= lob.gpu_quota:
        return
    parts = ", ".join(f"{e.name} {e.max_replicas} x TP {e.tensor_parallel}" for e in lob.endpoints)
    found.errors.append(
        Problem(
            ctx.files.get(lob.name, lob.name),
            "gpu_quota",
            f"the quota is {lob.gpu_quota} GPU(s) and the endpoints need {need} at their maximum replicas ({parts})",
            f"raise gpu_quota to at least {need}, or lower replicas (autoscaling.max_replicas) or tensor_parallel",
        )
    )


def _gpu_groups(ctx: Context, found: Findings) -> None:
    supply, demand = ctx.gpu_supply(), ctx.gpu_demand()
    for type_name, need in sorted(demand.items()):
        have = supply.get(type_name)
        if have is None or need <= have:
            continue  # a type without a group is reported per endpoint
        group = next(g for g in ctx.env.groups("gpu") if g.instance_type == type_name)
        users = ", ".join(
            f"{s.label} {s.endpoint.max_replicas} x TP {s.endpoint.tensor_parallel}"
            for s in ctx.sites()
            if s.endpoint.instance_type == type_name
        )
        per_node = ctx.gpus(type_name)
        found.errors.append(
            Problem(
                ctx.env_file,
                f"{ctx.group_path(group)}.count",
                f"the {type_name} groups have {have} GPUs and the LOBs' endpoints need {need} at their maximum "
                f"replicas ({users})",
                f"add {-(-(need - have) // per_node)} {type_name} node(s), or lower replicas in the LOB files",
            )
        )
    quotas = sum(lob.gpu_quota for lob in ctx.lobs)
    total = sum(supply.values())
    if quotas > total:
        found.warnings.append(
            Problem(
                ctx.env_file,
                "lobs",
                f"the LOBs' gpu_quota add up to {quotas} GPUs and the gpu groups have {total}: quotas are "
                "ceilings, so LOBs can starve each other",
                "add GPU nodes or lower some gpu_quota",
            )
        )


def _rolling_updates(ctx: Context, found: Findings) -> None:
    """A rolling update starts a new pod before the old one goes: it needs TP free GPUs of the endpoint's type."""
    supply, demand = ctx.gpu_supply(), ctx.gpu_demand()
    for site in ctx.sites():
        e = site.endpoint
        if e.mode != "operator" or e.instance_type not in supply:
            continue
        free = supply[e.instance_type] - demand.get(e.instance_type, 0)
        if free >= e.tensor_parallel or demand.get(e.instance_type, 0) > supply[e.instance_type]:
            continue
        alone = e.max_replicas * e.tensor_parallel == supply[e.instance_type]
        whose = "its replicas hold" if alone else "its replicas and the other endpoints hold"
        found.warnings.append(
            Problem(
                site.file,
                site.at("replicas"),
                f"{whose} every {e.instance_type} GPU, so a rolling update stalls: the new pod waits for a GPU "
                "the old pod keeps",
                f"leave {e.tensor_parallel} GPU(s) of that type free, or follow the README procedure (scale to 0, "
                "then update)",
            )
        )


# --- Host RAM of GPU nodes ----------------------------------------------------------------------------------------


def curvine_node_gib(env: Environment) -> float:
    """Curvine on every GPU node: the worker and the FUSE client at their memory limits (the most they may take)."""
    resources = env.curvine.resources
    return (memory_bytes(resources.worker.memory_limit) + memory_bytes(resources.fuse.memory_limit)) / 1024**3


def _node_memory(ctx: Context, found: Findings) -> None:
    tiered = ctx.env.hyperpod.tiered_storage
    percent = tiered.memory_percent if tiered.enabled else None
    for type_name in sorted({g.instance_type for g in ctx.env.groups("gpu")}):
        instance = ctx.env.instance(type_name)
        candidates: list[tuple[PodMemory, int]] = []
        where: dict[tuple[str, str], Site] = {}
        for site in ctx.sites():
            if site.endpoint.instance_type == type_name:
                candidates.append((pod_memory(site.lob.name, site.endpoint), site.endpoint.max_replicas))
                where[(site.lob.name, site.endpoint.name)] = site
        pods = worst_packing(instance.gpus, candidates)
        node = node_memory(type_name, instance.memory_gib, percent, pods, curvine_gib=curvine_node_gib(ctx.env))
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


# --- L2 pool ------------------------------------------------------------------------------------------------------


def _l2_pool(ctx: Context, found: Findings) -> None:
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
