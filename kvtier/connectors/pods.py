"""Reading a live pod's wiring (the JSON the Kubernetes API returns), for the connectors' `pod_problems`: what both
connectors check the same way (the L2 mount, a variable set exactly once, vLLM's flags)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvtier.connectors.base import Obj
from kvtier.serving import L2_CLAIM, L2_MOUNT_PATH

HASH_SEED_VAR = "PYTHONHASHSEED"


def env_entries(container: Obj) -> list[Obj]:
    return [e for e in container.get("env", []) if isinstance(e, Mapping)]


def argv(container: Obj) -> list[Any]:
    return [*container.get("command", []), *container.get("args", [])]


def flag_values(args: Sequence[Any], flag: str) -> list[str]:
    """Every value of `flag` in vLLM's argv, as `--flag value` or `--flag=value`."""
    values = [str(args[i + 1]) for i, a in enumerate(args[:-1]) if a == flag]
    return values + [str(a).split("=", 1)[1] for a in args if str(a).startswith(flag + "=")]


def mount_problems(pod: Obj, container: Obj) -> list[str]:
    """The LOB's L2 claim is a volume of the pod, mounted once at the L2 mount path."""
    volumes = {
        v.get("name")
        for v in pod.get("spec", {}).get("volumes", [])
        if v.get("persistentVolumeClaim", {}).get("claimName") == L2_CLAIM
    }
    if not volumes:
        return [f"no volume of claim {L2_CLAIM}"]
    mounts = [m for m in container.get("volumeMounts", []) if m.get("mountPath") == L2_MOUNT_PATH]
    if len(mounts) != 1 or mounts[0].get("name") not in volumes:
        return [f"the {L2_CLAIM} volume is not mounted once at {L2_MOUNT_PATH}"]
    return []


def single_value(env: Sequence[Obj], name: str, wanted: str, why: str) -> list[str]:
    """The variable `name` is set exactly once, to `wanted`."""
    values = [e.get("value") for e in env if e.get("name") == name]
    if values == [wanted]:
        return []
    if not values:
        return [f"{name} is not set ({why})"]
    return [f"{name} is {', '.join(repr(v) for v in values)}, not {wanted!r} ({why})"]
