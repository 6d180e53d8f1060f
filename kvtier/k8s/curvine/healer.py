"""The L2 healer: a DaemonSet on GPU nodes that deletes L2 pods whose Curvine mount died with a FUSE restart, so their
controllers recreate them with a live mount (docs/l2.md "When a FUSE mount dies").

The logic is scripts/l2_healer.py, run by the Curvine runtime image's python3 as a non-root user. It reads one host
file, the node's mount table (`/proc/1/mountinfo`, read-only): no pod's volumes, Secrets or tokens are mounted into
it (docs/l2.md "Least privilege"). It may remove pods only in the LOB namespaces, each of which grants that in a Role
bound by
`add_healer_access` (RBAC cannot name a namespace pattern, so there is no cluster-wide grant). A
ValidatingAdmissionPolicy (`guard_objects`) lets the API server refuse any pod delete by the healer unless the pod holds
the L2 claim, and admits its evictions only as dry runs (the PodDisruptionBudget check before the delete).
"""

from __future__ import annotations

from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED_READ_ONLY, digest, env_var, field_env
from kvtier.k8s.curvine.scripts import HEALER, script_text
from kvtier.k8s.namespace import LOB_LABEL
from kvtier.k8s.placement import placement
from kvtier.serving import L2_CLAIM
from kvtier.sizing import HEALER_RESOURCES

PODS_DIR = f"{names.KUBELET_DIR}/pods"  # only matched in the mount table: never mounted into the healer
HOST_MOUNTINFO = "/proc/1/mountinfo"  # the host's init's mount table: the node's mounts, host paths
MOUNTINFO = "/host/proc/1/mountinfo"  # where the healer sees it
FUSE_FSTYPE = "fuse.curvinefs"  # curvine-fuse's mount type (docs/references.md "Issue 22")
SCRIPT_DIR = "/opt/kvtier/healer"
HEALER_UID = 65532  # any non-root user: the mount table is world-readable (docs/references.md "Issue 22")
INTERVAL_SECONDS = 15
# Only what the healer needs in a LOB namespace: find the pods on its node (list), ask whether a PodDisruptionBudget
# allows removing one (an Eviction dry run) and delete it (the guard admits only pods that hold the L2 claim).
ACCESS_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
]
# In its own namespace: how many healers report at once (the brake reads their readiness).
BRAKE_RULES: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
DEAD_CHECKS = 2  # checks in a row a mount answers ENOTCONN before its pods go (15-30 s)
ENDPOINT_INTERVAL_SECONDS = 300  # at most one pod per endpoint per node per 5 minutes
BRAKE_SHARE = 0.3  # hold when more than 30% of the healers (and at least BRAKE_MIN_NODES) report at once
BRAKE_MIN_NODES = 2
GUARD = "kvtier-l2-healer-guard"


def healer_service_account() -> str:
    return f"system:serviceaccount:{names.NAMESPACE}:{names.HEALER}"


def healer_args(env: Environment) -> list[str]:
    labels = names.component_labels("l2-healer")
    return [
        f"--mountinfo={MOUNTINFO}",
        f"--pods-dir={PODS_DIR}",
        f"--fuse-dir={names.PLUGIN_DIR}",  # curvine-csi's FUSE pod mounts under it (standalone_manager.go)
        f"--fstype={FUSE_FSTYPE}",
        f"--claim={L2_CLAIM}",
        # The LOB namespaces are looked up at run time: adding a LOB changes no platform object (docs/l2.md).
        f"--namespace-selector={LOB_LABEL}",
        f"--interval-seconds={INTERVAL_SECONDS}",
        f"--dead-checks={DEAD_CHECKS}",
        *(f"--master-url={names.master_web_url(i)}" for i in range(env.curvine.masters)),
        # The FUSE pods use the host network (names.FUSE_WEB_PORT); the kubelet expands $(HOST_IP).
        f"--fuse-health-url=http://$(HOST_IP):{names.FUSE_WEB_PORT}/healthz",
        f"--endpoint-interval-seconds={ENDPOINT_INTERVAL_SECONDS}",
        f"--brake-share={BRAKE_SHARE:g}",
        f"--brake-min-nodes={BRAKE_MIN_NODES}",
        f"--healer-namespace={names.NAMESPACE}",
        "--healer-selector=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
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
            field_env("HOST_IP", "status.hostIP"),
            env_var("PYTHONDONTWRITEBYTECODE", "1"),
            env_var("PYTHONUNBUFFERED", "1"),
        ],
        "ports": [{"name": "health", "containerPort": names.HEALER_HEALTH_PORT}],
        # Ready = every L2 mount is on the node's live FUSE and master and FUSE answer (what `kvtier verify` reads).
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
        "securityContext": {
            **RESTRICTED_READ_ONLY,
            "runAsNonRoot": True,
            "runAsUser": HEALER_UID,
            "runAsGroup": HEALER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            # One file, not the host's /proc: no other process's files, no /proc/1/root.
            {"name": "mountinfo", "mountPath": MOUNTINFO, "readOnly": True},
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
        ],
    }
    _role(chart, "brake", names.NAMESPACE, BRAKE_RULES)
    _namespace_reader(chart)
    for key, manifest in guard_objects().items():
        api_object(chart, key, manifest)
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
                            {"name": "mountinfo", "hostPath": {"path": HOST_MOUNTINFO, "type": "File"}},
                            {"name": "script", "configMap": {"name": names.HEALER}},
                        ],
                    },
                },
            },
        },
    )
    return chart


def guard_objects() -> dict[str, dict[str, Any]]:
    """The server-side guard: the healer's pod deletes must hold the L2 claim, its evictions must be dry runs.
    On a DELETE the API server gives the policy the pod as `oldObject`; on an eviction only the Eviction object (the
    eviction handler deletes the pod without admission), so a real eviction could not be checked (docs/references.md
    "Issue 22")."""
    holds_claim = (
        "has(oldObject.spec.volumes) && oldObject.spec.volumes.exists(v, has(v.persistentVolumeClaim) && "
        f"v.persistentVolumeClaim.claimName == '{L2_CLAIM}')"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": GUARD},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]},
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods/eviction"],
                    },
                ]
            },
            "matchConditions": [
                {
                    "name": "only-the-l2-healer",
                    "expression": f"request.userInfo.username == '{healer_service_account()}'",
                }
            ],
            "validations": [
                {
                    "expression": f"request.subResource == 'eviction' || ({holds_claim})",
                    "message": f"the L2 healer may delete only pods that hold the claim {L2_CLAIM}",
                },
                {
                    "expression": "request.subResource != 'eviction' || request.dryRun == true",
                    "message": "the L2 healer may only dry-run evictions (a PodDisruptionBudget check before a delete)",
                },
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": GUARD},
        "spec": {"policyName": GUARD, "validationActions": ["Deny"]},
    }
    return {"guard-policy": policy, "guard-binding": binding}


def _role(chart: cdk8s.Chart, id: str, namespace: str, rules: list[dict[str, Any]]) -> None:
    metadata = {"name": names.HEALER, "namespace": namespace}
    api_object(
        chart,
        f"{id}-role",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata, "rules": rules},
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


def _namespace_reader(chart: cdk8s.Chart) -> None:
    """List namespaces (names and labels only; no access to anything in them): which are LOB namespaces now."""
    metadata = {"name": names.HEALER}
    api_object(
        chart,
        "namespaces-role",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata,
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}],
        },
    )
    api_object(
        chart,
        "namespaces-binding",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": names.HEALER},
            "subjects": [{"kind": "ServiceAccount", "name": names.HEALER, "namespace": names.NAMESPACE}],
        },
    )


def add_healer_access(chart: cdk8s.Chart, id: str, namespace: str) -> None:
    """Let the healer list, dry-run-evict and delete L2 pods in one LOB namespace (a Role and a RoleBinding there)."""
    _role(chart, id, namespace, ACCESS_RULES)
