"""Quota and GPU groups: each LOB's quota, the GPU groups against every endpoint at its maximum replicas, and
rolling updates that need a free GPU.

Rolling updates: the operator renders a Deployment and the CRD has no field for its strategy, so it rolls with the
Kubernetes default (maxSurge 25% rounded up = at least one pod, maxUnavailable 25% rounded down = none below four
replicas; docs/references.md). The new pod starts before an old one goes: the LOB's quota must admit one surge pod
per operator endpoint (a quota costs nothing, so every endpoint can roll at once), and each GPU type needs the GPUs
of one surge pod free (rollouts then finish one pod after another). Standalone Deployments never surge.
"""

from __future__ import annotations

from kvtier.config.lob import LineOfBusiness
from kvtier.errors import Problem, name_list
from kvtier.planner.autoscaling import surge_gpus  # one home: the autoscaling plan's max uses it too
from kvtier.rules.context import Context, Findings


def check_quota(ctx: Context, lob: LineOfBusiness, found: Findings) -> None:
    held = sum(e.max_replicas * e.tensor_parallel for e in lob.endpoints)
    surge = sum(surge_gpus(e) for e in lob.endpoints)
    need = held + surge
    if need <= lob.gpu_quota:
        return
    biggest = sorted(lob.endpoints, key=lambda e: -(e.max_replicas * e.tensor_parallel + surge_gpus(e)))
    parts = name_list(
        [f"{e.name} {e.max_replicas}{' + 1 surge' if surge_gpus(e) else ''} x TP {e.tensor_parallel}" for e in biggest]
    )
    why = "at their maximum replicas" if not surge else "at their maximum replicas plus one rolling-update pod each"
    found.errors.append(
        Problem(
            ctx.files.get(lob.name, lob.name),
            "gpu_quota",
            f"the quota is {lob.gpu_quota} GPU(s) and the endpoints need {need} {why} ({parts})",
            f"raise gpu_quota to at least {need}, or lower replicas (autoscaling.max_replicas) or tensor_parallel",
        )
    )


def check_gpu_groups(ctx: Context, found: Findings) -> None:
    supply, demand = ctx.gpu_supply(), ctx.gpu_demand()
    for type_name, need in sorted(demand.items()):
        have = supply.get(type_name)
        if have is None or need <= have:
            continue  # a type without a group is reported per endpoint
        group = next(g for g in ctx.env.groups("gpu") if g.instance_type == type_name)
        sites = [s for s in ctx.sites() if s.endpoint.instance_type == type_name]
        sites.sort(key=lambda s: -s.endpoint.max_replicas * s.endpoint.tensor_parallel)  # the biggest first
        users = name_list([f"{s.label} {s.endpoint.max_replicas} x TP {s.endpoint.tensor_parallel}" for s in sites])
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


def check_rolling_updates(ctx: Context, found: Findings) -> None:
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
                f"leave {e.tensor_parallel} GPU(s) of that type free (one more node, or one replica less), or "
                "update it with the scale-to-zero procedure (docs/endpoints.md)",
            )
        )
