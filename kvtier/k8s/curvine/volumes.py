"""Static PersistentVolumes on Curvine paths: the only place that knows the CSI driver's volume attributes.

Every PV gets the same FUSE settings, so all of them share one FUSE process per node (the mount key is master-addrs,
fs-path and the passthrough keys, csi volume_handle.go). Attribute keys: notes Q4 "Static PV volumeAttributes".
"""

from __future__ import annotations

import re
from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.toml import CLIENT_TTL_ACTION, CLIENT_TTL_MS
from kvtier.k8s.placement import placement

# Curvine echoes PV/PVC sizes and enforces none: the capacity is nominal, large enough for any claim to bind.
PV_CAPACITY = "1Pi"
STORAGE_CLASS_NAME = ""  # static binding: no class, so no default StorageClass is injected into the claim
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_PATH_PART = re.compile(r"^[A-Za-z0-9._-]+$")


def master_addresses(env: Environment) -> str:
    """`host:port[,host:port]` of the masters' client RPC, as the CSI driver and curvine-fuse take it."""
    return ",".join(f"{names.master_hostname(i)}:{names.MASTER_RPC_PORT}" for i in range(env.curvine.masters))


def fuse_parameters() -> dict[str, str]:
    """Passed by the CSI driver to `curvine-fuse --<key> <value>`: FUSE reads no kvtier TOML (its pod is built by
    the driver), so its TTL and metrics port are set here, explicitly."""
    return {
        "client.ttl-ms": CLIENT_TTL_MS,
        "client.ttl-action": CLIENT_TTL_ACTION,
        "web-port": str(names.FUSE_WEB_PORT),
    }


def volume_attributes(env: Environment, curvine_path: str) -> dict[str, str]:
    return {
        "master-addrs": master_addresses(env),
        "fs-path": "/",  # the FUSE root: one mount per node serves every LOB
        "curvine-path": curvine_path,  # bind-mounted into the pod; created through FUSE when missing
        **fuse_parameters(),
    }


def check_curvine_path(path: str) -> str:
    parts = path.split("/")
    if (
        not path.startswith("/")
        or path == "/"
        or not all(_PATH_PART.match(p) and p not in (".", "..") for p in parts[1:])
    ):
        raise ValueError(f"'{path}' is not an absolute Curvine path below / (like /kvtier/dev/retail)")
    return path


def static_pv(
    chart: cdk8s.Chart,
    id: str,
    *,
    env: Environment,
    name: str,
    curvine_path: str,
    claim_namespace: str | None = None,
    claim_name: str = "l2-cache",
) -> cdk8s.ApiObject:
    """A static ReadWriteMany PV on `curvine_path` (Retain; capacity nominal). Bind a PVC to it by `volumeName`
    (`pvc_spec` gives the spec). With `claim_namespace`, the PV is reserved for that claim (`claimRef`), so no claim
    in another namespace can take it first."""
    if not _DNS_SUBDOMAIN.match(name):
        raise ValueError(f"'{name}' is not a valid PersistentVolume name (lowercase DNS subdomain)")
    check_curvine_path(curvine_path)
    gpu = placement(env, "gpu").node_selector
    spec: dict[str, Any] = {
        "capacity": {"storage": PV_CAPACITY},
        "accessModes": ["ReadWriteMany"],
        # Delete would make the driver run `curvine-cli fs rm -r` on the path (controller.go DeleteVolume).
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": STORAGE_CLASS_NAME,
        "volumeMode": "Filesystem",
        # Only GPU nodes run the node plugin: the scheduler keeps L2 pods off nodes that could not mount it.
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(gpu.items())]}
                ]
            }
        },
        "csi": {
            "driver": names.CSI_DRIVER,
            # Any string that does not split into 3 parts on '@' is a static handle (volume_handle.go); unique per PV.
            "volumeHandle": f"kvtier-{name}",
            "volumeAttributes": volume_attributes(env, curvine_path),
        },
    }
    if claim_namespace is not None:
        spec["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": claim_namespace,
            "name": claim_name,
        }
    return api_object(
        chart,
        id,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "labels": {"kvtier.io/l2": "curvine"},
                "annotations": {
                    "kvtier.io/curvine-path": curvine_path,
                    "kvtier.io/capacity": "nominal: Curvine enforces no volume size; the janitor enforces the budget",
                },
            },
            "spec": spec,
        },
    )


def pvc_spec(pv_name: str) -> dict[str, Any]:
    """The `spec` of a PersistentVolumeClaim that binds to the static PV `pv_name`."""
    return {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": STORAGE_CLASS_NAME,
        "volumeName": pv_name,
        "resources": {"requests": {"storage": PV_CAPACITY}},
    }
