"""Voluntary disruptions (issue 38): what an endpoint's PodDisruptionBudget (`maxUnavailable: 1`,
kvtier/k8s/disruption.py) cannot protect, as warnings.

- An endpoint that can run on one replica (`replicas: 1`, or `autoscaling.min_replicas: 1`): its budget lets the
  eviction through (one that refused it would block every node drain, healer restart and FUSE roll on that node),
  so each such disruption takes the endpoint down until the replacement has loaded its weights.
- A standalone endpoint whose replicas, with the other endpoints of its instance type, hold every GPU of that type:
  an evicted replica has nowhere to start until its node is back, and its budget then blocks the drain of a second
  node that holds one of its replicas. (Operator endpoints get the rolling-update warning of rules/gpus.py, which
  asks for the same free GPUs.)

How the budget meets the quota: an eviction's replacement is one pod more while the evicted one terminates, the same
as one rolling-update step. The quota counts a terminating pod until it is gone, so a standalone endpoint's
replacement starts once the evicted pod has drained (its quota has no surge room, rules/gpus.py), an operator
endpoint's at once (its quota holds one surge pod). Neither asks for more than `check_quota` counts.
"""

from __future__ import annotations

from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings, Site


def check_one_replica(site: Site, found: Findings) -> None:
    e = site.endpoint
    if e.min_replicas > 1:
        return
    field = "autoscaling.min_replicas" if e.autoscaling is not None else "replicas"
    found.warnings.append(
        Problem(
            site.file,
            site.at(field),
            "with one replica, a node drain, an L2 healer restart or `kvtier l2 roll-fuse` on its node stops the "
            "endpoint until the replacement has loaded its weights: its PodDisruptionBudget (maxUnavailable 1) lets "
            "the eviction through, since one that refused it would block the drain for ever",
            f"use {field}: 2 to keep one replica serving through voluntary disruptions",
        )
    )


def check_drain_room(ctx: Context, found: Findings) -> None:
    supply, demand = ctx.gpu_supply(), ctx.gpu_demand()
    for site in ctx.sites():
        e = site.endpoint
        if e.mode != "standalone" or e.instance_type not in supply:
            continue
        held = demand.get(e.instance_type, 0)
        if held > supply[e.instance_type] or supply[e.instance_type] - held >= e.tensor_parallel:
            continue  # over-subscribed: an error of rules/gpus.py; or room for a replacement
        found.warnings.append(
            Problem(
                site.file,
                site.at("replicas"),
                f"the endpoints hold every {e.instance_type} GPU, so a replica evicted by a node drain cannot start "
                "elsewhere until its node is back, and the PodDisruptionBudget then holds the drain of a second node "
                "with a replica of this endpoint",
                f"leave {e.tensor_parallel} GPU(s) of that type free (one more node, or one replica less)",
            )
        )
