"""The FUSE check (issue 38): a claim in `curvine` on the same FUSE mount every L2 pod uses, and the one-shot pod that
`kvtier l2 roll-fuse` runs on a node with it.

curvine-csi creates a node's FUSE pod only when a volume is staged or published there (`EnsureStandalone`,
docs/references.md "Issue 38"), and a cordoned node gets no new L2 pod. The check pod is bound to the node by
`nodeName` (as curvine-csi binds its FUSE pods, so a cordon does not stop it), mounts this claim, and so makes the
node plugin create the new FUSE pod with the version it now runs; it then writes a file through the mount, reads it
back and removes it: the new client answers. Its volume carries the same FUSE parameters as the LOBs' volumes, so it
shares their mount key, and so their FUSE pod (kvtier/k8s/curvine/volumes.py). Its directory, `/kvtier/<env>/_fuse-check`,
can be no LOB's (a LOB name cannot start with `_`), and the check leaves nothing in it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import cdk8s

from kvtier.config.environment import Environment
from kvtier.k8s.base import api_object
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.common import POD_SECURITY, RESTRICTED_READ_ONLY
from kvtier.k8s.curvine.volumes import pvc_spec, static_pv

CLAIM = "kvtier-fuse-check"
COMPONENT = "fuse-check"
MOUNT = "/check"
POD_PREFIX = "kvtier-fuse-check-"
DEADLINE_S = 300  # the pod's activeDeadlineSeconds: a check that never runs ends by itself
NODE_ANNOTATION = "kvtier.io/node"
# Write, read back, remove: through the node's new FUSE mount ($HOSTNAME is the pod's name: unique per node).
CHECK_SCRIPT = (
    f'set -e; f="{MOUNT}/$HOSTNAME-$$"; echo kvtier-fuse-check > "$f"; '
    'test "$(cat "$f")" = kvtier-fuse-check; rm -f "$f"; echo "the FUSE mount answers"'
)


def volume_name(env: Environment) -> str:
    return f"kvtier-{env.name}-fuse-check"


def curvine_path(env: Environment) -> str:
    return f"/kvtier/{env.name}/_fuse-check"


def add_fuse_check(chart: cdk8s.Chart, env: Environment) -> None:
    """The check's PersistentVolume (reserved for the claim) and its claim in `curvine`."""
    name = volume_name(env)
    static_pv(
        chart,
        "fuse-check-volume",
        env=env,
        name=name,
        curvine_path=curvine_path(env),
        claim_namespace=names.NAMESPACE,
        claim_name=CLAIM,
    )
    api_object(
        chart,
        "fuse-check-claim",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": names.NAMESPACE, "labels": names.component_labels(COMPONENT)},
            "spec": pvc_spec(name),
        },
    )


def pod_name(node: str) -> str:
    """One check pod per node: a digest of the node's name (node names can be longer than a pod name may be)."""
    return POD_PREFIX + hashlib.sha256(node.encode()).hexdigest()[:12]


def check_pod(env: Environment, node: str) -> dict[str, Any]:
    """The one-shot pod on `node`. No requests (BestEffort): the node is as full as before (its L2 pods still run
    there), and a pod bound by nodeName that does not fit is refused by the kubelet, not queued."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(node),
            "namespace": names.NAMESPACE,
            "labels": names.component_labels(COMPONENT),
            "annotations": {NODE_ANNOTATION: node},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_S,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "tolerations": [{"operator": "Exists"}],  # a cordoned or tainted GPU node, as curvine-csi's FUSE pods
            "securityContext": POD_SECURITY,
            "containers": [
                {
                    "name": "check",
                    "image": env.curvine.images.curvine,  # on every GPU node already (the worker runs it)
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", CHECK_SCRIPT],
                    "securityContext": RESTRICTED_READ_ONLY,
                    "volumeMounts": [{"name": "l2", "mountPath": MOUNT}],
                }
            ],
            "volumes": [{"name": "l2", "persistentVolumeClaim": {"claimName": CLAIM}}],
        },
    }
