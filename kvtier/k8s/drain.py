"""How a standalone engine leaves without losing a request (issue 38): its preStop hook, its termination grace period.

A pod that Kubernetes deletes (scale-in, rollout, eviction, node drain) first gets a deletionTimestamp: vllm-router
drops it from its rotation on that event (its pod discovery), while the kubelet runs the preStop hook, which waits
for the engine's in-flight requests (kvtier/k8s/engine_drain.py, shipped inline); only then does vLLM get SIGTERM.
The hook waits at most the endpoint's longest allowed request (`max_request_seconds`, which the router enforces as
its request timeout) plus a quiet window; the grace period adds the time vLLM needs to exit. docs/endpoints.md
"Disruptions" and docs/references.md "Issue 38" give the sources.

`KVTIER_DRAIN_BREAK=1` (tests only) renders the engines without the hook and with the old 60 s grace period: the
real-engine scale-in test must then lose requests (tests/engine/test_scale_out.py).
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

from kvtier.config.endpoint import Endpoint
from kvtier.k8s.endpoint_names import ENGINE_PORT

BREAK = "KVTIER_DRAIN_BREAK"
QUIET_S = 5  # no request running, waiting or finished for this long: the router's removal has landed
SHUTDOWN_S = 30  # after the hook: vLLM's API server, engine core and workers exit before the kubelet's SIGKILL
OLD_GRACE_S = 60  # what engines had before this issue (and have with the break switch)


def drain_broken() -> bool:
    return os.environ.get(BREAK) == "1"


def script() -> str:
    """The hook's program, as shipped (package data, so the tests run exactly this text)."""
    return resources.files("kvtier.k8s").joinpath("engine_drain.py").read_text(encoding="utf-8")


def drain_deadline_s(endpoint: Endpoint) -> int:
    """How long the hook may wait: the longest allowed request, plus the quiet window."""
    return endpoint.request_seconds + QUIET_S


def termination_grace_s(endpoint: Endpoint) -> int:
    return OLD_GRACE_S if drain_broken() else drain_deadline_s(endpoint) + SHUTDOWN_S


def pre_stop_command(endpoint: Endpoint, python: str = "python3") -> list[str]:
    """The hook's command (the engine image's python3 runs the script inline: no ConfigMap, no file)."""
    return [python, "-c", script(), str(ENGINE_PORT), str(drain_deadline_s(endpoint)), str(QUIET_S)]


def lifecycle(endpoint: Endpoint) -> dict[str, Any] | None:
    """The engine container's `lifecycle`, or None with the break switch."""
    if drain_broken():
        return None
    return {"preStop": {"exec": {"command": pre_stop_command(endpoint)}}}
