#!/usr/bin/env python3
"""kvtier engine drain: the preStop hook of a standalone engine container (issue 38).

Kubernetes runs a preStop hook when the pod is deleted (scale-in, rollout, eviction, drain) and sends SIGTERM to
vLLM only once the hook returns (or the termination grace period ends). By then the router has taken the pod out of
its rotation: vllm-router removes a worker as soon as its pod carries a deletionTimestamp (docs/references.md "Issue
38"). What is left are the requests the engine already has. This hook waits for them:

  drained = vLLM reports no request running or waiting, and none finished, for QUIET_S seconds in a row

(the quiet window covers a request the router sent just before it saw the deletion, still on its way). It gives up
at DEADLINE_S (the endpoint's longest allowed request plus the quiet window; the grace period leaves vLLM time to
exit after that). It polls the engine's own /metrics on 127.0.0.1: `vllm:num_requests_running`,
`vllm:num_requests_waiting` and `vllm:request_success_total`. An engine that refuses connections has nothing left to
serve: the hook returns at once. Every state change is one line on the container's log (PID 1's stdout), so `kubectl
logs` shows the drain. Always exits 0: a failing hook would only add an event, the container stops either way.

Usage: engine_drain.py PORT DEADLINE_S QUIET_S [LOG] (LOG `-`: this process's stdout, for tests). Standard library
only (runs on the engine image's python3).
"""

from __future__ import annotations

import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
FINISHED = "vllm:request_success_total"
POLL_S = 0.5
SCRAPE_TIMEOUT_S = 5.0
LOG = "/proc/1/fd/1"  # the container's main process: its stdout is what `kubectl logs` shows


def total(text: str, name: str) -> float | None:
    """The sum of one metric over its label sets (None when the engine does not export it)."""
    pattern = re.compile(r"^" + re.escape(name) + r"(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.MULTILINE)
    values = pattern.findall(text)
    return sum(float(v) for v in values) if values else None


class EngineGoneError(Exception):
    """The engine refuses connections: it has stopped, nothing is left to wait for."""


def scrape(url: str, timeout_s: float) -> tuple[float, float] | None:
    """(requests running or waiting, requests finished) from the engine's /metrics; None when it cannot tell now."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", errors="replace")
    except urllib.error.URLError as err:
        if isinstance(err.reason, ConnectionRefusedError):
            raise EngineGoneError(str(err.reason)) from err
        return None
    except ConnectionRefusedError as err:
        raise EngineGoneError(str(err)) from err
    except OSError:  # a timeout or a reset: busy, ask again
        return None
    running, waiting, finished = total(text, RUNNING), total(text, WAITING), total(text, FINISHED)
    if running is None or waiting is None:
        return None
    return running + waiting, finished or 0.0


def drain(
    read: Callable[[float], tuple[float, float] | None],
    deadline_s: float,
    quiet_s: float,
    log: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Wait until the engine is drained (see the module doc) or `deadline_s` passed; returns how it ended. `read`
    (given a timeout) is `scrape` of the engine's /metrics."""
    start = clock()
    quiet_since: float | None = None
    last: tuple[float, float] | None = None
    said = ""
    while True:
        now = clock()
        if now - start >= deadline_s:
            return f"deadline: still {last[0]:g} request(s) in flight after {deadline_s:g} s" if last else "deadline"
        try:
            state = read(min(SCRAPE_TIMEOUT_S, max(0.5, deadline_s - (now - start))))
        except EngineGoneError as err:
            return f"engine gone ({err})"
        if state is not None:
            busy, finished = state
            if busy == 0 and last is not None and finished == last[1]:
                quiet_since = quiet_since if quiet_since is not None else now
                if now - quiet_since >= quiet_s:
                    return f"drained after {now - start:.1f} s"
            else:
                quiet_since = None
            message = f"{busy:g} request(s) running or waiting"
            if message != said:
                log(f"kvtier drain: {message}")
                said = message
            last = state
        sleep(POLL_S)


def logger(path: str) -> Callable[[str], None]:
    def log(line: str) -> None:
        try:
            if path == "-":
                raise OSError("stdout")
            with Path(path).open("a", encoding="utf-8") as out:
                out.write(line + "\n")
        except OSError:
            print(line, flush=True)

    return log


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: engine_drain.py PORT DEADLINE_S QUIET_S [LOG]", file=sys.stderr)
        return 0  # a hook must never keep a pod from stopping
    port, deadline_s, quiet_s = int(argv[0]), float(argv[1]), float(argv[2])
    _log = logger(argv[3] if len(argv) == 4 else LOG)
    _log(f"kvtier drain: waiting up to {deadline_s:g} s for the engine's requests (quiet window {quiet_s:g} s)")
    url = f"http://127.0.0.1:{port}/metrics"
    outcome = drain(lambda timeout_s: scrape(url, timeout_s), deadline_s, quiet_s, _log)
    _log(f"kvtier drain: {outcome}; vLLM gets SIGTERM now")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
