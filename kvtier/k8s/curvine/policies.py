"""Who may reach Curvine: the `curvine` namespace's NetworkPolicies and the L2 fence (docs/l2.md "Who may reach
Curvine").

Curvine v0.4.1 checks no caller identity on its RPC (docs/references.md "Issue 33"), so the network is the only
control, and only objects a LOB-namespace admin cannot edit count: these live in `curvine`.
- Default deny: nothing reaches a Curvine pod unless a policy below admits it.
- Master RPC (8995): masters, workers, the CSI controller (`curvine-cli fs mkdir`) and node plugin, and each GPU node's
  host-network FUSE pod (the fence). Journal (8996): masters only (Raft). Worker RPC (8997): masters, workers, the
  CSI pods and the FUSE pods (the fence).
- Master web (9000, read-only routes): the healer, the LOB janitors (`/api/workers`) and the metrics scrapers.
  Worker web (9001): the metrics scrapers.
- The kubelet's probes come from the node's own address, which the VPC CNI's policy agent always admits.

The FUSE pods run on the host network, so their source is a node address: no selector names it. The fence (a small
Deployment here, `scripts/l2_fence.py`) writes one policy per GPU node admitting that node's primary address as a
/32, owned by the Node. No static `ipBlock` is admitted to Curvine (tests/k8s/curvine/test_policies.py checks that
none overlaps a pod range).
"""

from __future__ import annotations

from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED_READ_ONLY, digest, env_var
from kvtier.k8s.curvine.janitor import COMPONENT as JANITOR_COMPONENT
from kvtier.k8s.curvine.janitor import COMPONENT_LABEL
from kvtier.k8s.curvine.scripts import FENCE, script_text
from kvtier.k8s.isolation import METRICS_SCRAPER_LABEL, isolation_broken
from kvtier.k8s.namespace import LOB_LABEL
from kvtier.k8s.placement import placement

COMPONENT_KEY = "app.kubernetes.io/component"
FENCE_NAME = "kvtier-l2-fence"
FENCE_PREFIX = "l2-fence-"  # + node name: the per-node policies the fence writes
FENCE_UID = 65532
FENCE_SCRIPT_DIR = "/opt/kvtier/fence"
FENCE_RESOURCES = {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"cpu": "100m", "memory": "96Mi"}}
FENCE_INTERVAL_S = 10
FENCE_HEARTBEAT = "/run/fence/heartbeat"  # touched after each pass that succeeded; the probes read its age


def _heartbeat_probe(max_age_s: int, period_s: int, failures: int) -> dict[str, Any]:
    check = f"import os,sys,time; sys.exit(time.time() - os.path.getmtime('{FENCE_HEARTBEAT}') > {max_age_s})"
    return {
        "exec": {"command": ["python3", "-c", check]},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _component(*components: str) -> dict[str, Any]:
    return {
        "matchLabels": dict(names.SELECTOR_NAME),
        "matchExpressions": [{"key": COMPONENT_KEY, "operator": "In", "values": sorted(components)}],
    }


def _peers(*components: str) -> list[dict[str, Any]]:
    return [{"podSelector": _component(*components)}]


def _ports(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _policy(name: str, selector: dict[str, Any], ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": names.NAMESPACE},
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"], "ingress": ingress},
    }


CURVINE_CLIENTS = ("master", "worker", "csi-controller", "csi-node")
SCRAPERS = {"namespaceSelector": {"matchLabels": {METRICS_SCRAPER_LABEL: "true"}}}
JANITORS = {
    "namespaceSelector": {"matchExpressions": [{"key": LOB_LABEL, "operator": "Exists"}]},
    "podSelector": {"matchLabels": {COMPONENT_LABEL: JANITOR_COMPONENT}},
}


def curvine_policies() -> list[dict[str, Any]]:
    """The static policies of the `curvine` namespace (module doc); the fence adds one per GPU node."""
    master, worker = _component("master"), _component("worker")
    return [
        _policy("default-deny-ingress", {}, []),
        _policy(
            "master-rpc",
            master,
            [
                {"from": _peers(*CURVINE_CLIENTS), "ports": _ports(names.MASTER_RPC_PORT)},
                {"from": _peers("master"), "ports": _ports(names.JOURNAL_PORT)},
            ],
        ),
        _policy("worker-rpc", worker, [{"from": _peers(*CURVINE_CLIENTS), "ports": _ports(names.WORKER_RPC_PORT)}]),
        _policy(
            "master-web",
            master,
            [{"from": [*_peers("l2-healer"), JANITORS, SCRAPERS], "ports": _ports(names.MASTER_WEB_PORT)}],
        ),
        _policy("worker-web", worker, [{"from": [SCRAPERS], "ports": _ports(names.WORKER_WEB_PORT)}]),
    ]


# Where a pod may get its address when kvtier does not know the VPC (an existing cluster): every private range, and
# the CGNAT range custom networking often gives pods.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")


def pod_ranges(env: Environment) -> tuple[str, ...]:
    """Every range the VPC CNI may take a pod's address from: on the VPC CNI pods get VPC addresses, so the VPC
    kvtier creates; on an existing cluster kvtier does not know the VPC, so every private range."""
    if env.hyperpod.existing is not None:
        return PRIVATE_RANGES
    return (env.network.cidr,)


def fence_args() -> list[str]:
    workers = ",".join(f"{k}={v}" for k, v in sorted(names.component_labels("worker").items()))
    return [
        f"--namespace={names.NAMESPACE}",
        f"--worker-selector={workers}",
        f"--prefix={FENCE_PREFIX}",
        f"--target={COMPONENT_KEY}=master:{names.MASTER_RPC_PORT}",
        f"--target={COMPONENT_KEY}=worker:{names.WORKER_RPC_PORT}",
        f"--interval-s={FENCE_INTERVAL_S}",
        f"--heartbeat={FENCE_HEARTBEAT}",
    ]


FENCE_CLUSTER_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
    # `status.podIP=<node address>` only: is a node's address a pod's (an address reused after a node went away)?
    # Also the Curvine workers (which nodes to fence) in its own namespace.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
]
FENCE_NAMESPACE_RULES = [
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "create", "delete"]},
]


def _fence(chart: KvtierChart, env: Environment) -> None:
    labels = names.component_labels("l2-fence")
    script = script_text(FENCE)
    meta = {"name": FENCE_NAME, "namespace": names.NAMESPACE, "labels": labels}
    api_object(
        chart, "fence-script", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {FENCE: script}}
    )
    api_object(
        chart,
        "fence-sa",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta, "automountServiceAccountToken": True},
    )
    subject = [{"kind": "ServiceAccount", "name": FENCE_NAME, "namespace": names.NAMESPACE}]
    for kind, rules in (("ClusterRole", FENCE_CLUSTER_RULES), ("Role", FENCE_NAMESPACE_RULES)):
        scoped = meta if kind == "Role" else {"name": FENCE_NAME, "labels": labels}
        rbac = "rbac.authorization.k8s.io/v1"
        api_object(
            chart, f"fence-{kind.lower()}", {"apiVersion": rbac, "kind": kind, "metadata": scoped, "rules": rules}
        )
        api_object(
            chart,
            f"fence-{kind.lower()}-binding",
            {
                "apiVersion": rbac,
                "kind": f"{kind}Binding",
                "metadata": scoped,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": FENCE_NAME},
                "subjects": subject,
            },
        )
    container = {
        "name": "fence",
        "image": env.curvine.images.curvine,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{FENCE_SCRIPT_DIR}/{FENCE}"],
        "args": fence_args(),
        "env": [env_var("PYTHONDONTWRITEBYTECODE", "1"), env_var("PYTHONUNBUFFERED", "1")],
        "resources": FENCE_RESOURCES,
        # Ready once a pass has written the policies, and while passes keep succeeding; restarted after 5 minutes of
        # failing passes (an API it cannot reach: a restart re-reads the token and the CA).
        "readinessProbe": {**_heartbeat_probe(3 * FENCE_INTERVAL_S, FENCE_INTERVAL_S, 1), "initialDelaySeconds": 5},
        "livenessProbe": {**_heartbeat_probe(300, 60, 3), "initialDelaySeconds": 60},
        "securityContext": {
            **RESTRICTED_READ_ONLY,
            "runAsNonRoot": True,
            "runAsUser": FENCE_UID,
            "runAsGroup": FENCE_UID,
        },
        "volumeMounts": [
            {"name": "script", "mountPath": FENCE_SCRIPT_DIR, "readOnly": True},
            {"name": "run", "mountPath": FENCE_HEARTBEAT.rsplit("/", 1)[0]},
        ],
    }
    api_object(
        chart,
        "fence",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},  # one writer of the fence policies at a time
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels, "annotations": {"kvtier.io/config-digest": digest(script)}},
                    "spec": {
                        "serviceAccountName": FENCE_NAME,
                        "enableServiceLinks": False,
                        "priorityClassName": names.PRIORITY_CLASS,
                        **placement(env, "system").pod_spec(),
                        "securityContext": dict(POD_SECURITY),
                        "containers": [container],
                        "volumes": [
                            {"name": "script", "configMap": {"name": FENCE_NAME}},
                            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                        ],
                    },
                },
            },
        },
    )


def policies_chart(app: cdk8s.App, env: Environment) -> list[KvtierChart]:
    """The `curvine` namespace's policies and the fence (applied after the namespace, before the cluster); none
    under KVTIER_ISOLATION_BREAK=1 (the old manifests, for the connectivity tests)."""
    if isolation_broken():
        return []
    chart = KvtierChart(app, "curvine-policies")
    for policy in curvine_policies():
        api_object(chart, policy["metadata"]["name"], policy)
    _fence(chart, env)
    return [chart]
