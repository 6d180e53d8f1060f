"""Pod and container security contexts for kvtier's own pods (Kubernetes Pod Security Standards, "restricted"
profile: https://kubernetes.io/docs/concepts/security/pod-security-standards/).

Every pod gets RuntimeDefault seccomp, no privilege escalation and no Linux capabilities. Running as non-root and a
read-only root filesystem are per image: `NON_ROOT_UID` where the image's files are world-readable and the process
writes only to mounted volumes (docs/references.md).
"""

from __future__ import annotations

from typing import Any

NON_ROOT_UID = 65532  # an unprivileged UID/GID with no meaning in the images ("nonroot" in distroless images)
TMP_VOLUME = "tmp"  # an emptyDir at /tmp for pods with a read-only root filesystem


def pod_security_context(*, non_root: bool) -> dict[str, Any]:
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if non_root:
        context.update(runAsNonRoot=True, runAsUser=NON_ROOT_UID, runAsGroup=NON_ROOT_UID, fsGroup=NON_ROOT_UID)
    return context


def container_security_context(*, read_only_root: bool) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
    }


def tmp_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod volume, container mount) of a writable /tmp."""
    return {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "1Gi"}}, {"name": TMP_VOLUME, "mountPath": "/tmp"}
