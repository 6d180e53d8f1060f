"""The Curvine cluster: namespace, configuration, masters on system nodes, one worker per GPU node."""

from __future__ import annotations

from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import (
    POD_SECURITY,
    RESTRICTED,
    config_mount,
    config_volume,
    digest,
    env_var,
    field_env,
    tcp_probe,
)
from kvtier.k8s.curvine.scripts import MASTER_INIT, script_text
from kvtier.k8s.curvine.toml import cluster_toml
from kvtier.k8s.placement import placement

# Journal replay on restart can take minutes (upstream chart: startupProbe failureThreshold 90 for Raft replay).
MASTER_STARTUP_SECONDS = 900
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
ZONE_TOPOLOGY = "topology.kubernetes.io/zone"


def raft_quorum(masters: int) -> int:
    return masters // 2 + 1


def master_max_unavailable(masters: int) -> int:
    """Disruptions that keep a Raft majority; a single master may still be drained (a short L2 outage, not a block)."""
    return max(1, masters - raft_quorum(masters))


def namespace_chart(app: cdk8s.App, env: Environment) -> KvtierChart:
    chart = KvtierChart(app, "curvine-namespace")
    api_object(
        chart,
        "namespace",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": names.NAMESPACE,
                # The CSI node plugin (mount propagation) and the FUSE pods it creates (hostNetwork, hostPID, /dev/fuse)
                # are privileged; every other pod here drops all capabilities on its own.
                "labels": {"pod-security.kubernetes.io/enforce": "privileged", "kvtier.io/environment": env.name},
            },
        },
    )
    api_object(
        chart,
        "priority-class",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": names.PRIORITY_CLASS},
            "value": names.PRIORITY_VALUE,
            "globalDefault": False,
            "description": "kvtier L2 data path (Curvine workers, L2 healer, janitors): above the inference engines",
        },
    )
    return chart


def cluster_chart(app: cdk8s.App, env: Environment) -> KvtierChart:
    chart = KvtierChart(app, "curvine-cluster")
    toml = cluster_toml(env)
    api_object(chart, "config", _config_map(names.CONFIG_MAP, {names.CONFIG_KEY: toml}))
    init_script = script_text(MASTER_INIT)
    api_object(chart, "scripts", _config_map(names.SCRIPTS_CONFIG_MAP, {MASTER_INIT: init_script}))
    config_digest = digest(toml, init_script)
    _masters(chart, env, config_digest)
    _workers(chart, env, config_digest)
    return chart


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": names.NAMESPACE},
        "data": data,
    }


def _service_account(chart: cdk8s.Chart, name: str) -> None:
    # Masters and workers never call the Kubernetes API: no RBAC, no token.
    api_object(
        chart,
        f"{name}-sa",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": names.NAMESPACE},
            "automountServiceAccountToken": False,
        },
    )


def _server(service: str, image: str, resources: dict[str, Any], extra_env: list[dict[str, Any]]) -> dict[str, Any]:
    """A curvine-server container run directly, not through /entrypoint.sh: the entrypoint pipes the server through
    `tee` and does not forward SIGTERM, while the server itself shuts down cleanly on SIGTERM (rpc_server.rs)."""
    return {
        "name": service,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [names.SERVER_BINARY, "--service", service, "--conf", names.CONFIG_FILE],
        "workingDir": names.CURVINE_HOME,
        "env": [*extra_env, env_var("CURVINE_CONF_FILE", names.CONFIG_FILE)],  # also for `cv` in kubectl exec
        "resources": resources,
        # Runs as the image's root user (no USER in the image) to own its volumes, with no capability at all.
        "securityContext": dict(RESTRICTED),
    }


def _masters(chart: cdk8s.Chart, env: Environment, config_digest: str) -> None:
    cfg = env.curvine
    labels = names.component_labels("master")
    api_object(
        chart,
        "master-storage-class",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": names.MASTER_STORAGE_CLASS},
            "provisioner": "ebs.csi.aws.com",
            "parameters": {"type": "gp3", "encrypted": "true", "csi.storage.k8s.io/fstype": "ext4"},
            "reclaimPolicy": "Retain",  # metadata outlives a deleted claim; delete the EBS volume by hand
            "volumeBindingMode": "WaitForFirstConsumer",  # the volume is made in the zone of the master's node
            "allowVolumeExpansion": True,
        },
    )
    _service_account(chart, names.MASTER)
    api_object(
        chart,
        "master-service",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": names.MASTER, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "clusterIP": "None",
                # Raft peers must resolve each other before any of them is ready.
                "publishNotReadyAddresses": True,
                "selector": labels,
                "ports": [
                    {"name": "rpc", "port": names.MASTER_RPC_PORT, "targetPort": "rpc"},
                    {"name": "journal", "port": names.JOURNAL_PORT, "targetPort": "journal"},
                    {"name": "web", "port": names.MASTER_WEB_PORT, "targetPort": "web"},
                ],
            },
        },
    )
    server = _server(
        "master",
        cfg.images.curvine,
        cfg.resources.master.k8s(),
        [
            field_env("POD_NAME", "metadata.name"),
            # Must equal one journal peer's hostname, or the master refuses to start (cluster_conf.rs).
            env_var(
                "CURVINE_MASTER_HOSTNAME",
                f"$(POD_NAME).{names.MASTER}.{names.NAMESPACE}.svc.{names.CLUSTER_DOMAIN}",
            ),
        ],
    )
    server["ports"] = [
        {"name": "rpc", "containerPort": names.MASTER_RPC_PORT},
        {"name": "journal", "containerPort": names.JOURNAL_PORT},
        {"name": "web", "containerPort": names.MASTER_WEB_PORT},
    ]
    # The RPC port opens once the journal is replayed and the Raft role is known (master_server.rs start()).
    server["startupProbe"] = tcp_probe(names.MASTER_RPC_PORT, period=10, failures=MASTER_STARTUP_SECONDS // 10)
    server["readinessProbe"] = tcp_probe(names.MASTER_RPC_PORT, period=10, failures=3)
    server["livenessProbe"] = tcp_probe(names.MASTER_RPC_PORT, period=20, failures=6)
    server["volumeMounts"] = [
        config_mount(),
        {"name": "meta", "mountPath": names.META_MOUNT},
        {"name": "journal", "mountPath": names.JOURNAL_MOUNT},
    ]
    init = {
        "name": "check-volumes",
        "image": cfg.images.curvine,
        "imagePullPolicy": "IfNotPresent",
        "command": ["bash", f"{names.SCRIPTS_DIR}/{MASTER_INIT}", names.META_DIR, names.JOURNAL_DIR, names.CONFIG_FILE],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": dict(RESTRICTED),
        "volumeMounts": [
            config_mount(),
            {"name": "scripts", "mountPath": names.SCRIPTS_DIR, "readOnly": True},
            {"name": "meta", "mountPath": names.META_MOUNT},
            {"name": "journal", "mountPath": names.JOURNAL_MOUNT},
        ],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": names.MASTER,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 60,
        **placement(env, "system").pod_spec(),
        "affinity": {
            "podAntiAffinity": {
                # One master per node: losing a node loses one Raft member only (prod has 3 system nodes).
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME_TOPOLOGY}
                ]
            }
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_TOPOLOGY,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": labels},
            }
        ],
        "securityContext": dict(POD_SECURITY),
        "initContainers": [init],
        "containers": [server],
        "volumes": [config_volume(), {"name": "scripts", "configMap": {"name": names.SCRIPTS_CONFIG_MAP}}],
    }
    api_object(
        chart,
        "master-statefulset",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": names.MASTER, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "replicas": cfg.masters,
                "serviceName": names.MASTER,
                # All peers start together so a Raft majority can form (a master opens its RPC port only then).
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate"},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            **names.prometheus_annotations(names.MASTER_WEB_PORT),
                            "kvtier.io/config-digest": config_digest,
                        },
                    },
                    "spec": pod_spec,
                },
                "volumeClaimTemplates": [
                    _claim_template("meta", cfg.master_meta_gb),
                    _claim_template("journal", cfg.master_journal_gb),
                ],
            },
        },
    )
    api_object(
        chart,
        "master-pdb",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": names.MASTER, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {"maxUnavailable": master_max_unavailable(cfg.masters), "selector": {"matchLabels": labels}},
        },
    )


def _claim_template(name: str, size_gb: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": names.MASTER_STORAGE_CLASS,
            "resources": {"requests": {"storage": f"{size_gb}Gi"}},
        },
    }


def _workers(chart: cdk8s.Chart, env: Environment, config_digest: str) -> None:
    cfg = env.curvine
    labels = names.component_labels("worker")
    _service_account(chart, names.WORKER)
    server = _server(
        "worker",
        cfg.images.curvine,
        cfg.resources.worker.k8s(),
        [
            field_env("POD_IP", "status.podIP"),
            # Clients connect to the address a worker advertises: the pod IP routes from every node on the VPC CNI,
            # so no hostNetwork is needed (notes Q6). The worker keeps its id in <data>/<cluster_id>/version.
            env_var("CURVINE_WORKER_HOSTNAME", "$(POD_IP)"),
        ],
    )
    server["ports"] = [
        {"name": "rpc", "containerPort": names.WORKER_RPC_PORT},
        {"name": "web", "containerPort": names.WORKER_WEB_PORT},
    ]
    # A worker rescans its blocks at start; TCP probes on the RPC port as upstream (no HTTP health route).
    server["startupProbe"] = tcp_probe(names.WORKER_RPC_PORT, period=10, failures=60)
    server["readinessProbe"] = tcp_probe(names.WORKER_RPC_PORT, period=10, failures=3)
    server["livenessProbe"] = tcp_probe(names.WORKER_RPC_PORT, period=20, failures=6)
    server["volumeMounts"] = [config_mount(), {"name": "data", "mountPath": names.WORKER_DATA_MOUNT}]
    pod_spec: dict[str, Any] = {
        "serviceAccountName": names.WORKER,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        # Guaranteed (kvtier.config.curvine) and above the engines: a full node evicts an engine, not the L2 worker.
        "priorityClassName": names.PRIORITY_CLASS,
        **placement(env, "gpu").pod_spec(),
        "securityContext": dict(POD_SECURITY),
        "containers": [server],
        "volumes": [
            config_volume(),
            # The instance-store NVMe. Type Directory, not DirectoryOrCreate: if the lifecycle script did not prepare
            # it (NVMe not mounted), the pod waits with a clear event instead of filling the root EBS volume.
            # Upstream runs workers privileged "for FUSE"; a worker runs no FUSE and writes plain files (notes Q6).
            {"name": "data", "hostPath": {"path": names.WORKER_HOST_PATH, "type": "Directory"}},
        ],
    }
    api_object(
        chart,
        "worker-daemonset",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": names.WORKER, "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            **names.prometheus_annotations(names.WORKER_WEB_PORT),
                            "kvtier.io/config-digest": config_digest,
                        },
                    },
                    "spec": pod_spec,
                },
            },
        },
    )
