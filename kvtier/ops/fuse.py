"""The GPU nodes' Curvine FUSE clients (issue 38): which version each node runs, read through the Kubernetes API with
kvtier's bounded client (kvtier/ops/kube.py), for `kvtier status` and `kvtier l2 roll-fuse`.

curvine-csi builds each node's FUSE pod (label `app=curvine-standalone`, container `curvine-fuse`) from the image its
node plugin is told to use (`STANDALONE_IMAGE`, kvtier/k8s/curvine/csi.py) when a volume is first mounted on the node,
and keeps a Ready one as it is: after a Curvine or CSI upgrade every node keeps its old client until its FUSE pod is
replaced (docs/l2.md "Upgrading the FUSE clients"). The version of a node is its FUSE pod's image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kvtier.config.environment import Environment
from kvtier.k8s.curvine import names
from kvtier.k8s.placement import node_selector
from kvtier.ops.checks import Check
from kvtier.ops.kube import REQUEST_TIMEOUT_S, list_items

FUSE_CONTAINER = "curvine-fuse"  # standalone_manager.go buildStandalone
PLUGIN_CONTAINER = "csi-plugin"
STANDALONE_IMAGE = "STANDALONE_IMAGE"


def selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def is_ready(obj: Mapping[str, Any]) -> bool:
    """A node's or a pod's Ready condition."""
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def container_image(pod: Mapping[str, Any], container: str) -> str:
    for item in pod.get("spec", {}).get("containers") or []:
        if item.get("name") == container:
            return str(item.get("image", ""))
    return ""


def plugin_fuse_image(pod: Mapping[str, Any]) -> str:
    """The FUSE image a node plugin builds FUSE pods from: its STANDALONE_IMAGE, else its own image."""
    for item in pod.get("spec", {}).get("containers") or []:
        if item.get("name") == PLUGIN_CONTAINER:
            for var in item.get("env") or []:
                if var.get("name") == STANDALONE_IMAGE and var.get("value"):
                    return str(var["value"])
            return str(item.get("image", ""))
    return ""


def node_name(pod: Mapping[str, Any]) -> str:
    return str(pod.get("spec", {}).get("nodeName", ""))


@dataclass(frozen=True)
class NodeFuse:
    """One GPU node: its FUSE pods (normally one), its node plugin, and whether the node is Ready and schedulable."""

    node: str
    ready: bool
    unschedulable: bool
    annotations: Mapping[str, str]
    fuse_pods: tuple[Mapping[str, Any], ...]
    plugin: Mapping[str, Any] | None

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(sorted({container_image(p, FUSE_CONTAINER) for p in self.fuse_pods}))

    @property
    def version(self) -> str:
        return ", ".join(self.versions) if self.fuse_pods else "none"


def gpu_node_selector(env: Environment) -> str:
    return selector(node_selector(env, "gpu"))


def read_fleet(env: Environment, core: Any) -> list[NodeFuse]:
    """Every GPU node with its FUSE pods and node plugin (`core`: a kubernetes CoreV1Api on kvtier's client)."""
    options: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S}
    nodes = list_items(partial(core.list_node, label_selector=gpu_node_selector(env), **options), "GPU nodes")
    fuse = list_items(
        partial(core.list_namespaced_pod, names.NAMESPACE, label_selector=selector(names.FUSE_POD_LABELS), **options),
        f"FUSE pods in {names.NAMESPACE}",
    )
    plugins = list_items(
        partial(
            core.list_namespaced_pod,
            names.NAMESPACE,
            label_selector=selector(names.component_labels("csi-node")),
            **options,
        ),
        f"CSI node plugins in {names.NAMESPACE}",
    )
    return fleet(nodes, fuse, plugins)


def fleet(
    nodes: Sequence[Mapping[str, Any]], fuse: Sequence[Mapping[str, Any]], plugins: Sequence[Mapping[str, Any]]
) -> list[NodeFuse]:
    out = []
    for node in sorted(nodes, key=lambda n: str(n.get("metadata", {}).get("name", ""))):
        name = str(node.get("metadata", {}).get("name", ""))
        here = [p for p in fuse if node_name(p) == name and not p.get("metadata", {}).get("deletionTimestamp")]
        plugin = next((p for p in plugins if node_name(p) == name), None)
        out.append(
            NodeFuse(
                name,
                is_ready(node),
                bool(node.get("spec", {}).get("unschedulable")),
                dict(node.get("metadata", {}).get("annotations") or {}),
                tuple(here),
                plugin,
            )
        )
    return out


def fleet_checks(env: Environment, nodes: Sequence[NodeFuse]) -> list[Check]:
    """`kvtier status`: each GPU node's FUSE client against the pinned version, and one check of the fleet as a whole
    (a mixed fleet runs clients of two versions against one Curvine)."""
    target = env.curvine.images.csi
    roll = f"kvtier l2 roll-fuse -e {env.name}"
    checks = []
    for node in nodes:
        if not node.fuse_pods:
            checks.append(Check("fuse", node.node, "none", "ok", "no L2 pod has run here yet: the first one starts it"))
            continue
        if node.versions == (target,):
            checks.append(Check("fuse", node.node, node.version, "ok"))
            continue
        checks.append(Check("fuse", node.node, node.version, "degraded", f"kvtier pins {target}: run `{roll}`"))
    running = sorted({v for node in nodes for v in node.versions})
    if len(running) > 1:
        counts = {v: sum(1 for n in nodes if v in n.versions) for v in running}
        value = ", ".join(f"{v} on {n} node(s)" for v, n in counts.items())
        checks.append(Check("fuse", "fleet", value, "degraded", f"mixed FUSE client versions: run `{roll}`"))
    else:
        checks.append(Check("fuse", "fleet", running[0] if running else "no FUSE pod", "ok"))
    return checks
