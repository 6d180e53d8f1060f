"""The L2 healer: a DaemonSet on GPU nodes that deletes L2 pods whose Curvine mount died with a FUSE restart, so their
controllers recreate them with a live mount (docs/l2.md "When a FUSE mount dies").

The logic is scripts/l2_healer.py, run by the Curvine runtime image's python3. It reads the kubelet's pod volume
directories (read-only) and may delete pods only in the LOB namespaces, each of which grants that in a Role bound by
`add_healer_access` (RBAC cannot name a namespace pattern, so there is no cluster-wide grant).
"""

from __future__ import annotations

from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED_READ_ONLY, digest, env_var, field_env
from kvtier.k8s.curvine.scripts import HEALER, script_text
from kvtier.k8s.placement import placement
from kvtier.naming import lob_namespace
from kvtier.serving import L2_CLAIM
from kvtier.sizing import HEALER_RESOURCES

PODS_DIR = f"{names.KUBELET_DIR}/pods"
SCRIPT_DIR = "/opt/kvtier/healer"
INTERVAL_SECONDS = 15
# Only what the healer needs in a LOB namespace: find the pods on its node (list) and delete the broken ones.
ACCESS_RULES: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]}]


def healer_args(env: Environment) -> list[str]:
    return [
        f"--pods-dir={PODS_DIR}",
        f"--driver={names.CSI_DRIVER}",
        f"--claim={L2_CLAIM}",
        *(f"--namespace={lob_namespace(lob)}" for lob in env.lobs),
        f"--interval-seconds={INTERVAL_SECONDS}",
        "--stat-timeout-seconds=5",
        "--hung-checks=3",
        f"--health-port={names.HEALER_HEALTH_PORT}",
    ]


def healer_chart(app: cdk8s.App, env: Environment) -> KvtierChart:
    chart = KvtierChart(app, "curvine-healer")
    labels = names.component_labels("l2-healer")
    script = script_text(HEALER)
    api_object(
        chart,
        "script",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": names.HEALER, "namespace": names.NAMESPACE, "labels": labels},
            "data": {HEALER: script},
        },
    )
    api_object(
        chart,
        "service-account",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": names.HEALER, "namespace": names.NAMESPACE, "labels": labels},
            "automountServiceAccountToken": True,  # bound in each LOB namespace (add_healer_access)
        },
    )
    container = {
        "name": "healer",
        "image": env.curvine.images.curvine,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{SCRIPT_DIR}/{HEALER}"],
        "args": healer_args(env),
        "env": [
            field_env("NODE_NAME", "spec.nodeName"),
            env_var("PYTHONDONTWRITEBYTECODE", "1"),
            env_var("PYTHONUNBUFFERED", "1"),
        ],
        "ports": [{"name": "health", "containerPort": names.HEALER_HEALTH_PORT}],
        # Ready = every L2 mount on the node answered in the last check (what `kvtier verify` reads); alive = checking.
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "health"},
            "periodSeconds": 15,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "health"},
            "periodSeconds": 30,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        "resources": HEALER_RESOURCES,
        # Root without capabilities: the kubelet's pod directories are root's, mode 0750; nothing else is needed.
        "securityContext": {**RESTRICTED_READ_ONLY, "runAsUser": 0, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [
            # HostToContainer: mounts the kubelet makes after the healer started are visible to it.
            {"name": "pods", "mountPath": PODS_DIR, "readOnly": True, "mountPropagation": "HostToContainer"},
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
        ],
    }
    api_object(
        chart,
        "daemonset",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": names.HEALER, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": labels, "annotations": {"kvtier.io/config-digest": digest(script)}},
                    "spec": {
                        "serviceAccountName": names.HEALER,
                        "enableServiceLinks": False,
                        "priorityClassName": names.PRIORITY_CLASS,
                        "terminationGracePeriodSeconds": 5,
                        **placement(env, "gpu").pod_spec(),
                        "securityContext": dict(POD_SECURITY),
                        "containers": [container],
                        "volumes": [
                            {"name": "pods", "hostPath": {"path": PODS_DIR, "type": "Directory"}},
                            {"name": "script", "configMap": {"name": names.HEALER}},
                        ],
                    },
                },
            },
        },
    )
    return chart


def add_healer_access(chart: cdk8s.Chart, id: str, namespace: str) -> None:
    """Let the healer list and delete pods in one LOB namespace (a Role and a RoleBinding there)."""
    metadata = {"name": names.HEALER, "namespace": namespace}
    api_object(
        chart,
        f"{id}-role",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata, "rules": ACCESS_RULES},
    )
    api_object(
        chart,
        f"{id}-binding",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.HEALER},
            "subjects": [{"kind": "ServiceAccount", "name": names.HEALER, "namespace": names.NAMESPACE}],
        },
    )
