"""What keeps an endpoint serving through node loss and voluntary disruptions (issue 38): PodDisruptionBudgets for
engines and routers, and the router's short node-loss tolerations.

PodDisruptionBudgets (policy/v1) govern evictions: `kubectl drain`, the healer's eviction dry run, `kvtier l2
roll-fuse`, HyperPod or EKS node maintenance. Every budget here is `maxUnavailable: 1`:
- two or more replicas: one at a time goes, the others keep serving (a second eviction waits until the first
  replacement is Ready);
- one replica (an autoscaled endpoint at its minimum of one, or `replicas: 1`): the eviction is allowed and the
  endpoint is down until its replacement is Ready. `minAvailable: 1` would refuse it for ever, and every drain,
  healer restart and FUSE roll on its node would hang (Kubernetes docs, "Specifying a Disruption Budget");
  `kvtier validate` warns about such endpoints instead.
`unhealthyPodEvictionPolicy: AlwaysAllow`: a pod that is not Ready (crash-looping, stuck loading) can always be
evicted, so a broken replica never blocks a drain (policy/v1, GA in Kubernetes 1.31).

Tolerations: the DefaultTolerationSeconds admission plugin gives every pod 300 s for `node.kubernetes.io/not-ready`
and `unreachable`; routers carry their own 30 s, so a router on a dead node is replaced within about a minute
(node-monitor grace period plus 30 s) instead of six. Engines keep the default: a GPU engine evicted on a short
network blip reloads its weights for minutes, and the router stops sending to a dead engine on its own (circuit
breaker, kvtier/k8s/router.py). Sources: docs/references.md "Issue 38".
"""

from __future__ import annotations

from typing import Any

from kvtier.config.endpoint import Endpoint
from kvtier.k8s.endpoint_names import (
    COMPONENT_LABEL,
    ENDPOINT_LABEL,
    engine_labels,
    router_labels,
    router_name,
)
from kvtier.naming import lob_namespace

MAX_UNAVAILABLE = 1
NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
ROUTER_NODE_LOSS_S = 30  # the review's figure (reviews S2-3); long enough to ride out a kubelet restart


def node_loss_tolerations(seconds: int) -> list[dict[str, Any]]:
    """NoExecute tolerations of a not-ready or unreachable node for `seconds` (instead of the 300 s default)."""
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in NODE_LOSS_TAINTS
    ]


def pdb(name: str, namespace: str, labels: dict[str, str], selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "maxUnavailable": MAX_UNAVAILABLE,
            "selector": {"matchLabels": dict(selector)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def engine_selector(endpoint: Endpoint) -> dict[str, str]:
    """The endpoint's engine pods: kvtier's labels in standalone mode; in operator mode the `app` label the operator
    puts on the pods of an InferenceEndpointConfig (docs/references.md "Label the operator puts on an endpoint's
    pods")."""
    if endpoint.mode == "standalone":
        return {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "engine"}
    return {"app": endpoint.name}


def engine_pdb(lob: str, endpoint: Endpoint) -> dict[str, Any]:
    labels = {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "engine"}
    if endpoint.mode == "standalone":
        labels = dict(engine_labels(endpoint.name))
    return pdb(f"{endpoint.name}-engine", lob_namespace(lob), labels, engine_selector(endpoint))


def router_pdb(lob: str, endpoint: Endpoint) -> dict[str, Any]:
    labels = router_labels(endpoint.name)
    selector = {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "router"}
    return pdb(router_name(endpoint.name), lob_namespace(lob), labels, selector)
