"""Where pods go: the one helper that gives every chart its node selector and tolerations (design "Nodes")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvtier.config.environment import Environment
from kvtier.config.hyperpod import ROLE_LABEL, Role, Taint


@dataclass(frozen=True)
class Placement:
    node_selector: dict[str, str]
    tolerations: tuple[dict[str, str], ...]

    def pod_spec(self) -> dict[str, Any]:
        """The `nodeSelector` and `tolerations` fields of a PodSpec."""
        spec: dict[str, Any] = {"nodeSelector": dict(self.node_selector)}
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        return spec


def toleration(taint: Taint) -> dict[str, str]:
    if taint.value:
        return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    return {"key": taint.key, "operator": "Exists", "effect": taint.effect}


def node_selector(env: Environment, role: Role) -> dict[str, str]:
    """kvtier labels its own groups `kvtier.io/role=<role>`; an existing cluster uses the owner's selector."""
    existing = env.hyperpod.existing
    if existing is None:
        return {ROLE_LABEL: role}
    return dict(sorted(existing.nodes.role(role).selector.items()))


def placement(env: Environment, role: Role) -> Placement:
    """Node selector and tolerations for pods that must run on nodes of `role`."""
    seen: dict[tuple[str, str, str], dict[str, str]] = {}
    for group in env.groups(role):
        for taint in group.taints:
            seen.setdefault((taint.key, taint.value, taint.effect), toleration(taint))
    return Placement(node_selector=node_selector(env, role), tolerations=tuple(seen.values()))
