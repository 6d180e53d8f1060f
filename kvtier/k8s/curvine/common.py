"""Pieces several Curvine charts share: security contexts, env vars, the config volume."""

from __future__ import annotations

import hashlib
from typing import Any

from kvtier.k8s.curvine import names

# Containers that need no privilege: no capability, no escalation (each privileged exception says why where it is).
RESTRICTED: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# Sidecars are static Go binaries that write nothing to their image.
RESTRICTED_READ_ONLY: dict[str, Any] = {**RESTRICTED, "readOnlyRootFilesystem": True}
POD_SECURITY: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def env_var(name: str, value: str) -> dict[str, str]:
    return {"name": name, "value": value}


def config_volume() -> dict[str, Any]:
    return {"name": "config", "configMap": {"name": names.CONFIG_MAP}}


def config_mount() -> dict[str, Any]:
    return {"name": "config", "mountPath": names.CONFIG_DIR, "readOnly": True}


def digest(*texts: str) -> str:
    """Pod-template annotation value that changes with the config, so a config change rolls the pods."""
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode())
    return h.hexdigest()[:16]


def tcp_probe(port: int, *, period: int, failures: int, delay: int = 0) -> dict[str, Any]:
    probe: dict[str, Any] = {"tcpSocket": {"port": port}, "periodSeconds": period, "failureThreshold": failures}
    if delay:
        probe["initialDelaySeconds"] = delay
    probe["timeoutSeconds"] = 5
    return probe
