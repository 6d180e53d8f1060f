"""What Kubernetes does when it deletes a standalone engine's pod (scale-in, rollout, eviction), done to a local engine
with what kvtier renders for the pod (issue 38):

1. the pod gets a deletionTimestamp; at once, and independently of each other:
   - vllm-router's pod discovery removes the worker (`handle_pod_deletion` calls the router's `remove_worker`):
     here the router's own admin call, `POST /remove_worker?url=<engine>`, which runs the same method, because the
     test's router has static worker URLs instead of discovery (docs/references.md "Issue 38");
   - the kubelet runs the container's preStop hook: here the rendered hook's command, with the engine venv's python
     and the local port (`localize_hook`), bounded by the grace period;
2. when the hook returns, SIGTERM to the engine (its whole process group); SIGKILL when the grace period, counted
   from step 1, runs out.
A rendering without a hook (`KVTIER_DRAIN_BREAK=1`) gets SIGTERM at step 1, as Kubernetes does.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.k8s.endpoint_names import ENGINE_PORT
from tests.engine.engines import Engine, stop_group

HOOK_PORT_INDEX = 3  # argv of the rendered hook: python3 -c <script> PORT DEADLINE QUIET


@dataclass(frozen=True)
class Termination:
    """The rendered pod's termination settings: its preStop command (None without one) and grace period."""

    pre_stop: tuple[str, ...] | None
    grace_s: int


@dataclass
class Deleted:
    """What happened, on the caller's clock (ms): deletion, hook end, process group gone; the hook's own log."""

    deleted_ms: float = 0.0
    removed_ms: float = 0.0  # the router answered the removal
    hook_done_ms: float | None = None
    gone_ms: float = 0.0
    hook_exit: int | None = None
    hook_log: str = ""
    removal: str = ""  # the router's answer


def rendered_termination(config: Config, lob: str, endpoint: Endpoint) -> Termination:
    from kvtier.k8s.standalone import engine_deployment

    pod: dict[str, Any] = engine_deployment(config.env, lob, endpoint)["spec"]["template"]["spec"]
    container = pod["containers"][0]
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    return Termination(tuple(command) if command else None, int(pod["terminationGracePeriodSeconds"]))


def localize_hook(command: tuple[str, ...], python: str, port: int, log: Path) -> list[str]:
    """The rendered hook on this machine: the engine venv's python for the image's `python3`, the engine's port for
    the container port, and a log file instead of PID 1's stdout."""
    out = list(command)
    if out[0] != "python3" or out[HOOK_PORT_INDEX] != str(ENGINE_PORT):
        raise AssertionError(f"kvtier rendered a preStop hook this harness does not know: {out[:2]} ... {out[3:]}")
    out[0] = python
    out[HOOK_PORT_INDEX] = str(port)
    return [*out, str(log)]


def remove_worker(router_url: str, engine_url: str) -> str:
    response = httpx.post(f"{router_url}/remove_worker", params={"url": engine_url}, timeout=30)
    if response.status_code != 200:
        raise AssertionError(f"the router refused to remove {engine_url}: {response.status_code} {response.text}")
    return response.text


def delete_pod(
    engine: Engine, router_url: str, termination: Termination, python: str, log: Path, clock_ms: Any
) -> Deleted:
    """Steps 1 and 2 of the module doc, blocking; `clock_ms()` is the caller's traffic clock."""
    assert engine.proc is not None
    out = Deleted(deleted_ms=clock_ms())
    started = time.monotonic()

    def removal() -> None:
        out.removal = remove_worker(router_url, engine.url)
        out.removed_ms = clock_ms()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        removed = pool.submit(removal)
        if termination.pre_stop is not None:
            command = localize_hook(termination.pre_stop, python, engine.port, log)
            try:  # the kubelet stops a hook that outlives the grace period
                hook = subprocess.run(command, capture_output=True, text=True, timeout=termination.grace_s, check=False)
                out.hook_exit = hook.returncode
            except subprocess.TimeoutExpired:
                out.hook_exit = None
            out.hook_done_ms = clock_ms()
            out.hook_log = log.read_text(encoding="utf-8") if log.exists() else ""
        left = max(1.0, termination.grace_s - (time.monotonic() - started))
        stop_group(engine.proc, left, 0.2)  # SIGTERM now; SIGKILL when the grace period runs out
        out.gone_ms = clock_ms()
        removed.result(timeout=60)
    return out
