"""The platform stack's Curvine charts, in apply order (what they take on every GPU node: kvtier.sizing)."""

from __future__ import annotations

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart
from kvtier.k8s.curvine.cluster import cluster_chart, namespace_chart
from kvtier.k8s.curvine.csi import csi_chart
from kvtier.k8s.curvine.healer import healer_chart
from kvtier.k8s.curvine.policies import policies_chart


def curvine_charts(app: cdk8s.App, env: Environment) -> list[KvtierChart]:
    """Every Curvine chart of the environment, in apply order. `env` is a checked one (kvtier.rules.load_checked:
    the worker size fits the NVMe, the masters distinct system nodes, kvtier/rules/l2.py `curvine_problems`)."""
    return [
        namespace_chart(app, env),
        *policies_chart(app, env),  # who may reach Curvine: before any Curvine pod runs
        cluster_chart(app, env),
        csi_chart(app, env),
        healer_chart(app, env),
    ]
