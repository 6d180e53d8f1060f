"""The platform stack's Curvine charts, in apply order, and what Curvine takes on every GPU node."""

from __future__ import annotations

import cdk8s

from kvtier.config.curvine import cpu_millis, memory_bytes
from kvtier.config.environment import Environment
from kvtier.errors import ConfigError
from kvtier.k8s.base import KvtierChart
from kvtier.k8s.curvine.cluster import cluster_chart, namespace_chart
from kvtier.k8s.curvine.csi import PLUGIN_RESOURCES, SIDECAR_RESOURCES, csi_chart
from kvtier.rules.l2 import curvine_problems


def curvine_charts(app: cdk8s.App, env: Environment) -> list[KvtierChart]:
    """Every Curvine chart of the environment, in apply order. Raises ConfigError when the environment cannot hold
    the pool (worker size vs NVMe, masters vs system nodes), in case the loader did not check already."""
    problems = curvine_problems(env, "environment")
    if problems:
        raise ConfigError(problems)
    return [namespace_chart(app, env), cluster_chart(app, env), csi_chart(app, env)]


def gpu_node_requests(env: Environment) -> tuple[int, int]:
    """(millicores, bytes) Curvine requests on every GPU node: worker, FUSE pod and CSI node plugin. Capacity planning
    must leave this free: FUSE pods are placed by nodeName, so the kubelet rejects one that does not fit."""
    res = env.curvine.resources
    containers = [res.worker.k8s(), res.fuse.k8s(), PLUGIN_RESOURCES, SIDECAR_RESOURCES, SIDECAR_RESOURCES]
    cpu = sum(cpu_millis(c["requests"]["cpu"]) for c in containers)
    memory = sum(memory_bytes(c["requests"]["memory"]) for c in containers)
    return cpu, memory
