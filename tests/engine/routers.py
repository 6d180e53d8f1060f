"""kvtier's standalone router as a process on this machine: the flags kvtier renders, with pod discovery replaced.

`localize` changes only what cannot exist here, each change listed in ROUTER_MACHINE_FIT: Kubernetes pod discovery
(`--service-discovery`, `--selector`, `--service-discovery-port`, `--service-discovery-namespace`) becomes the engines'
URLs, and the listening addresses become free ports on 127.0.0.1. The policy and everything else pass through.
`Router` runs `vllm_router.launch_router` (what the `vllm-router` command runs) in its own process group, waits until
it serves, and stops it by process group on every path.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from kvtier.k8s import router as router_chart
from tests.engine.engines import EngineError, metric_sum, port_in_use, root_cause, stop_group, tail

DISCOVERY_FLAGS = {"--service-discovery": 0, "--service-discovery-port": 1, "--service-discovery-namespace": 1}
ROUTER_MACHINE_FIT = (
    "pod discovery (--service-discovery, --selector, ...): --worker-urls of the two local engines",
    "--host/--port and --prometheus-host/--prometheus-port: free ports on 127.0.0.1",
    "--worker-startup-check-interval 1 (default 30 s): the test waits for the engines itself",
    "engines: --enable-scale-out, which vLLM 0.30+ needs to serve /v1/completions/render to cache_aware",
)
ENGINE_EXTRA_ARGS = ("--enable-scale-out",)
STARTUP_S = 120.0
STOP_GRACE_S = 15.0
# KVTIER_ROUTER_BREAK=policy: kvtier renders each strategy with another strategy's policy (the checks must notice);
# KVTIER_ROUTER_BREAK=knobs: poolaware renders cache_aware with the router's defaults instead of the plan's knobs.
BROKEN_POLICY = {
    "prefixaware": "round_robin",
    "session": "round_robin",
    "roundrobin": "cache_aware",
    "poolaware": "round_robin",
}
BREAKS = ("policy", "knobs")


def localize(args: list[str], workers: list[str], port: int, metrics_port: int) -> list[str]:
    """kvtier's rendered router args with discovery replaced by `workers` and local ports."""
    out: list[str] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if flag == "--selector":  # nargs="+": every value up to the next flag
            i += 1
            while i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        if flag in DISCOVERY_FLAGS:
            i += 1 + DISCOVERY_FLAGS[flag]
            continue
        out.append(flag)
        i += 1
    local = {"--host": "127.0.0.1", "--port": str(port), "--prometheus-host": "127.0.0.1"}
    local["--prometheus-port"] = str(metrics_port)
    for flag, value in local.items():
        if flag not in out:
            raise AssertionError(f"kvtier rendered no {flag} for the router")
        out[out.index(flag) + 1] = value
    return [*out, "--worker-urls", *workers, "--worker-startup-check-interval", "1"]


@contextmanager
def broken(what: str | None) -> Iterator[None]:
    """kvtier renders a wrong policy while the router's flags are taken (the self-check of the routing checks)."""
    if what not in (None, *BREAKS):
        raise ValueError(f"KVTIER_ROUTER_BREAK={what!r}: use one of {', '.join(BREAKS)}")
    if what != "policy":  # knobs: routing_scenario.rendered_router_args replaces them
        yield
        return
    saved = router_chart.ROUTER_POLICY
    router_chart.ROUTER_POLICY = BROKEN_POLICY
    try:
        yield
    finally:
        router_chart.ROUTER_POLICY = saved


@dataclass
class Router:
    """One vllm-router process on 127.0.0.1."""

    python: str
    site: Path  # the install folder (router_install.ensure)
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    ready_s: float | None = None
    probes: dict[str, int] | None = None  # the probe paths kvtier renders -> HTTP status once ready

    @property
    def port(self) -> int:
        return int(self.args[self.args.index("--port") + 1])

    @property
    def metrics_port(self) -> int:
        return int(self.args[self.args.index("--prometheus-port") + 1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, why: str) -> EngineError:
        cause = root_cause(self.log)
        because = f" ({cause})" if cause else ""
        return EngineError(f"router ({self.url}): {why}{because}; last log lines of {self.log}:\n{tail(self.log)}")

    def start(self) -> None:
        for port in (self.port, self.metrics_port):
            if port_in_use(port):
                raise EngineError(f"router: port {port} on 127.0.0.1 is in use; stop what holds it")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHONPATH"))}
        env["PYTHONPATH"] = str(self.site)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [self.python, "-m", "vllm_router.launch_router", *self.args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = started + STARTUP_S
        while True:
            if self.proc.poll() is not None:
                raise self.fail(f"exited with code {self.proc.returncode} before serving")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}{router_chart.READINESS_PATH}", timeout=5).status_code == 200:
                    self.ready_s = time.monotonic() - started
                    paths = (router_chart.READINESS_PATH, router_chart.LIVENESS_PATH)
                    self.probes = {path: httpx.get(f"{self.url}{path}", timeout=5).status_code for path in paths}
                    return
            if time.monotonic() > deadline:
                raise self.fail(f"not ready after {STARTUP_S:.0f} s")
            time.sleep(0.5)

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text

    def metric(self, name: str) -> float:
        return metric_sum(self.metrics(), name)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, STOP_GRACE_S, poll_s=0.1)


@contextmanager
def running(router: Router) -> Iterator[Router]:
    try:
        router.start()
        yield router
    finally:
        router.stop()
