"""The Curvine CSI driver `curvine`: controller on system nodes, node plugin on GPU nodes, standalone FUSE mounts.

Facts from CurvineIO/curvine@v0.4.1 `curvine-csi/` (docs/references.md "The L2 pool"). Mount mode `standalone`: the node plugin
starts one FUSE pod per node per mount key (host network, its own resources), which survives restarts and upgrades of
the plugin; `embedded` would run FUSE inside the plugin container, so a plugin restart would cut every mount.
"""

from __future__ import annotations

from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED, RESTRICTED_READ_ONLY, env_var, field_env
from kvtier.k8s.curvine.fuse_check import add_fuse_check
from kvtier.k8s.placement import placement
from kvtier.sizing import CSI_PLUGIN_RESOURCES, CSI_SIDECAR_RESOURCES

CSI_SOCKET_DIR = "/csi"
CSI_ENDPOINT = f"unix://{CSI_SOCKET_DIR}/csi.sock"
SIDECAR_RESOURCES = CSI_SIDECAR_RESOURCES
PLUGIN_RESOURCES = CSI_PLUGIN_RESOURCES

# external-provisioner v6.3.0 deploy/kubernetes/rbac.yaml minus snapshots (unused), leases (one replica, no leader
# election), csistoragecapacities and pods/replicasets (capacity tracking off).
CONTROLLER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["persistentvolumes"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch", "update"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch", "create", "update", "patch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"], "verbs": ["get", "list", "watch"]},
]
# Node plugin in standalone mode, from the calls in node_standalone.go / standalone_manager.go: a PV informer and the
# orphan collector (cluster-wide PVs), FUSE pods and the per-node state ConfigMap (its own namespace only).
NODE_CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch"]},
]
NODE_NAMESPACE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]},
]


def csi_chart(app: cdk8s.App, env: Environment) -> KvtierChart:
    chart = KvtierChart(app, "curvine-csi")
    api_object(
        chart,
        "driver",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": names.CSI_DRIVER},
            "spec": {
                "attachRequired": False,  # no ControllerPublish: no VolumeAttachments, no attacher sidecar
                "podInfoOnMount": False,
                "volumeLifecycleModes": ["Persistent"],
                # Never chown a shared cache tree for a pod's fsGroup (a recursive walk over FUSE on every mount).
                "fsGroupPolicy": "None",
            },
        },
    )
    _rbac(chart)
    _controller(chart, env)
    _node(chart, env)
    _fuse_metrics(chart)
    add_fuse_check(chart, env)  # what `kvtier l2 roll-fuse` mounts to start and check a node's new FUSE pod
    return chart


def _service_account(chart: cdk8s.Chart, name: str, *, token: bool) -> None:
    api_object(
        chart,
        f"{name}-sa",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": names.NAMESPACE},
            "automountServiceAccountToken": token,
        },
    )


def _bind(chart: cdk8s.Chart, name: str, rules: list[dict[str, Any]], *, namespaced: bool) -> None:
    role_kind = "Role" if namespaced else "ClusterRole"
    scope = {"namespace": names.NAMESPACE} if namespaced else {}
    api_object(
        chart,
        f"{name}-{role_kind.lower()}",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": role_kind,
            "metadata": {"name": name, **scope},
            "rules": rules,
        },
    )
    api_object(
        chart,
        f"{name}-{role_kind.lower()}-binding",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": f"{role_kind}Binding",
            "metadata": {"name": name, **scope},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": names.NAMESPACE}],
        },
    )


def _rbac(chart: cdk8s.Chart) -> None:
    _service_account(chart, names.CSI_CONTROLLER, token=True)
    _bind(chart, names.CSI_CONTROLLER, CONTROLLER_RULES, namespaced=False)
    _service_account(chart, names.CSI_NODE, token=True)
    _bind(chart, names.CSI_NODE, NODE_CLUSTER_RULES, namespaced=False)
    _bind(chart, names.CSI_NODE, NODE_NAMESPACE_RULES, namespaced=True)
    # The FUSE pods' account: the node plugin must name one; curvine-fuse never calls the API, so no role, no token.
    _service_account(chart, names.FUSE_SERVICE_ACCOUNT, token=False)


def _plugin(image: str, mount_mode: str, extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "csi-plugin",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/opt/curvine/csi"],
        # --nodeid is required by the binary even in the controller (main.go).
        "args": ["--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(NODE_NAME)"],
        "env": [
            env_var("CSI_ENDPOINT", CSI_ENDPOINT),
            field_env("NODE_NAME", "spec.nodeName"),
            field_env("KUBERNETES_NAMESPACE", "metadata.namespace"),
            env_var("MOUNT_MODE", mount_mode),
            *extra_env,
        ],
        "ports": [{"name": "healthz", "containerPort": names.CSI_HEALTH_PORT}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "healthz"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 5,
        },
        "resources": PLUGIN_RESOURCES,
    }


def _sidecar(name: str, image: str, args: list[str], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "resources": SIDECAR_RESOURCES,
        "securityContext": dict(RESTRICTED_READ_ONLY),
        "volumeMounts": mounts,
    }


def _liveness_sidecar(image: str) -> dict[str, Any]:
    return _sidecar(
        "liveness-probe",
        image,
        [f"--csi-address={CSI_SOCKET_DIR}/csi.sock", f"--http-endpoint=:{names.CSI_HEALTH_PORT}"],
        [{"name": "socket-dir", "mountPath": CSI_SOCKET_DIR}],
    )


def _controller(chart: cdk8s.Chart, env: Environment) -> None:
    images = env.curvine.images
    labels = names.component_labels("csi-controller")
    socket = [{"name": "socket-dir", "mountPath": CSI_SOCKET_DIR}]
    # `embedded` as upstream's raw manifest: every process also builds a node server, and standalone mode would start
    # a FUSE-pod collector in the controller (driver.go, notes Q4).
    plugin = _plugin(images.csi, "embedded", [])
    # The controller only runs curvine-cli / `curvine-fuse validate-config` (directory creation for dynamic PVs):
    # upstream's privileged + SYS_ADMIN is not needed. kvtier binds static PVs only, so a wrong guess here would only
    # fail dynamic provisioning, loudly, in the PVC's events.
    plugin["securityContext"] = dict(RESTRICTED)
    plugin["volumeMounts"] = socket
    provisioner = _sidecar(
        "csi-provisioner",
        images.csi_provisioner,
        [f"--csi-address={CSI_SOCKET_DIR}/csi.sock", "--timeout=300s", "--leader-election=false", "--v=2"],
        socket,
    )
    api_object(
        chart,
        "controller",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": names.CSI_CONTROLLER, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                # Recreate: without leader election two provisioners must never run at once.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": names.CSI_CONTROLLER,
                        "enableServiceLinks": False,
                        **placement(env, "system").pod_spec(),
                        "securityContext": dict(POD_SECURITY),
                        "containers": [plugin, provisioner, _liveness_sidecar(images.livenessprobe)],
                        "volumes": [{"name": "socket-dir", "emptyDir": {}}],
                    },
                },
            },
        },
    )


def standalone_env(env: Environment) -> list[dict[str, Any]]:
    """How the node plugin builds FUSE pods (standalone_manager.go buildResourceRequirements reads these). Requests
    equal limits (kvtier.config.curvine), so the FUSE pod is Guaranteed; the driver sets no priorityClassName and
    reads no variable for one (buildStandalone), so FUSE keeps the default priority 0 of the engines."""
    fuse = env.curvine.resources.fuse
    out = [
        env_var("STANDALONE_SERVICE_ACCOUNT", names.FUSE_SERVICE_ACCOUNT),
        # FUSE pods use imagePullPolicy Never: their image must be the one this plugin already pulled on the node.
        env_var("STANDALONE_IMAGE", env.curvine.images.csi),
        env_var("STANDALONE_CPU_REQUEST", fuse.cpu_request),
        env_var("STANDALONE_MEMORY_REQUEST", fuse.memory_request),
        env_var("STANDALONE_MEMORY_LIMIT", fuse.memory_limit),
    ]
    if fuse.cpu_limit is not None:
        out.append(env_var("STANDALONE_CPU_LIMIT", fuse.cpu_limit))
    return out


def _node(chart: cdk8s.Chart, env: Environment) -> None:
    images = env.curvine.images
    labels = names.component_labels("csi-node")
    socket = {"name": "plugin-dir", "mountPath": CSI_SOCKET_DIR}
    plugin = _plugin(images.csi, "standalone", standalone_env(env))
    # Privileged: it bind-mounts FUSE subdirectories into pod volume paths under /var/lib/kubelet, which needs
    # CAP_SYS_ADMIN and Bidirectional mount propagation (Kubernetes allows Bidirectional only in privileged containers).
    plugin["securityContext"] = {"privileged": True}
    plugin["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"rm -f {CSI_SOCKET_DIR}/csi.sock"]}}}
    plugin["volumeMounts"] = [
        socket,
        {"name": "kubelet-dir", "mountPath": names.KUBELET_DIR, "mountPropagation": "Bidirectional"},
    ]
    registrar = _sidecar(
        "node-driver-registrar",
        images.node_driver_registrar,
        [
            f"--csi-address={CSI_SOCKET_DIR}/csi.sock",
            f"--kubelet-registration-path={names.PLUGIN_DIR}/csi.sock",
            f"--http-endpoint=:{names.REGISTRAR_HEALTH_PORT}",
        ],
        [socket, {"name": "registration-dir", "mountPath": "/registration"}],
    )
    registrar["ports"] = [{"name": "registrar", "containerPort": names.REGISTRAR_HEALTH_PORT}]
    registrar["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": "registrar"},
        "periodSeconds": 10,
        "timeoutSeconds": 3,
        "failureThreshold": 5,
    }
    liveness = _liveness_sidecar(images.livenessprobe)
    liveness["volumeMounts"] = [socket]
    pod_spec: dict[str, Any] = {
        "serviceAccountName": names.CSI_NODE,
        "enableServiceLinks": False,
        # Must outlive the pods whose mounts it serves: unmounting needs the plugin on the node.
        "priorityClassName": "system-node-critical",
        **placement(env, "gpu").pod_spec(),
        "securityContext": dict(POD_SECURITY),
        "containers": [plugin, registrar, liveness],
        "volumes": [
            {"name": "plugin-dir", "hostPath": {"path": names.PLUGIN_DIR, "type": "DirectoryOrCreate"}},
            {"name": "kubelet-dir", "hostPath": {"path": names.KUBELET_DIR, "type": "Directory"}},
            {"name": "registration-dir", "hostPath": {"path": names.REGISTRATION_DIR, "type": "Directory"}},
        ],
    }
    # Tolerate every taint (as upstream) while keeping the GPU-node selector: a NoExecute taint evicts the workloads,
    # and their volumes can only be torn down while the plugin still runs on the node.
    pod_spec["tolerations"] = [{"operator": "Exists"}]
    api_object(
        chart,
        "node",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": names.CSI_NODE, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        },
    )


def _fuse_metrics(chart: cdk8s.Chart) -> None:
    """FUSE pods are built in the plugin's code, so they cannot carry scrape annotations: a headless Service selecting
    them does (the kubernetes-service-endpoints convention); they listen on the host network."""
    api_object(
        chart,
        "fuse-metrics",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": names.FUSE_METRICS_SERVICE,
                "namespace": names.NAMESPACE,
                "labels": names.component_labels("fuse"),
                "annotations": names.prometheus_annotations(names.FUSE_WEB_PORT),
            },
            "spec": {
                "clusterIP": "None",
                "selector": dict(names.FUSE_POD_LABELS),
                "ports": [{"name": "metrics", "port": names.FUSE_WEB_PORT, "targetPort": names.FUSE_WEB_PORT}],
            },
        },
    )
