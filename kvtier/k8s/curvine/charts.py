"""The platform stack's Curvine charts, in apply order (what they take on every GPU node: kvtier.sizing)."""

from __future__ import annotations

import cdk8s

from kvtier.config.environment import Environment
from kvtier.errors import ConfigError
from kvtier.k8s.base import KvtierChart
from kvtier.k8s.curvine.cluster import cluster_chart, namespace_chart
from kvtier.k8s.curvine.csi import csi_chart
from kvtier.k8s.curvine.healer import healer_chart
from kvtier.rules.l2 import curvine_problems


def curvine_charts(app: cdk8s.App, env: Environment) -> list[KvtierChart]:
    """Every Curvine chart of the environment, in apply order. Raises ConfigError when the environment cannot hold
    the pool (worker size vs NVMe, masters vs system nodes), in case the loader did not check already."""
    problems = curvine_problems(env, "environment")
    if problems:
        raise ConfigError(problems)
    return [namespace_chart(app, env), cluster_chart(app, env), csi_chart(app, env), healer_chart(app, env)]
