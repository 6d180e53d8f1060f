"""The engines' preStop drain (kvtier/k8s/engine_drain.py): the decision on a scripted clock, the parsing of vLLM's
metrics, and the shipped text run as the pod runs it (`python3 -c`) against a metrics server on 127.0.0.1 that a
test drives. Against a real vLLM engine under load: tests/engine/test_scale_out.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvtier.k8s import drain
from kvtier.k8s.engine_drain import EngineGoneError, scrape, total
from kvtier.k8s.engine_drain import drain as run_drain

VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} %d
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


Read = Callable[[float], "tuple[float, float] | None"]


def scripted(states: Sequence[tuple[float, float] | None]) -> Read:
    """A `read` that returns one state per call, then the last one for ever."""
    calls = iter(states)
    last: list[tuple[float, float] | None] = [None]

    def read(_timeout: float) -> tuple[float, float] | None:
        last[0] = next(calls, last[0])
        return last[0]

    return read


def test_waits_for_the_streams_then_for_a_quiet_window() -> None:
    clock, lines = Clock(), list[str]()
    # 2 in flight for 10 polls, then none; one more request finishes at the 12th poll (a late one from the router).
    states = [(2.0, 5.0)] * 10 + [(0.0, 7.0), (0.0, 7.0), (0.0, 8.0), (0.0, 8.0)]
    outcome = run_drain(scripted(states), 60, 3, lines.append, clock, clock.sleep)
    assert outcome.startswith("drained")
    assert clock.now >= 12 * 0.5 + 3, "the quiet window restarted when the late request finished"
    assert lines == ["kvtier drain: 2 request(s) running or waiting", "kvtier drain: 0 request(s) running or waiting"]


def test_gives_up_at_the_deadline_and_says_how_many_were_left() -> None:
    clock = Clock()
    outcome = run_drain(scripted([(3.0, 1.0)]), 20, 3, lambda _: None, clock, clock.sleep)
    assert outcome == "deadline: still 3 request(s) in flight after 20 s" and 20 <= clock.now < 21


def test_an_unreadable_engine_is_waited_for_and_a_stopped_one_is_not() -> None:
    clock = Clock()
    outcome = run_drain(scripted([None] * 8 + [(0.0, 1.0)]), 30, 2, lambda _: None, clock, clock.sleep)
    assert outcome.startswith("drained") and clock.now >= 4 + 2

    def refused(_timeout: float) -> tuple[float, float]:
        raise EngineGoneError("connection refused")

    assert run_drain(refused, 30, 2, lambda _: None, clock, clock.sleep).startswith("engine gone")


def test_reads_vllms_metrics_summed_over_labels() -> None:
    text = VLLM_METRICS % (2, 1, 4)
    assert total(text, "vllm:num_requests_running") == 2
    assert total(text, "vllm:request_success_total") == 5
    assert total(text, "vllm:num_requests_swapped") is None


@contextmanager
def metrics_server(state: dict[str, int]) -> Iterator[int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (VLLM_METRICS % (state["running"], state["waiting"], state["finished"])).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_scrape_over_http_and_a_refused_port() -> None:
    with metrics_server({"running": 1, "waiting": 2, "finished": 3}) as port:
        assert scrape(f"http://127.0.0.1:{port}/metrics", 5) == (3, 4)
    with pytest.raises(EngineGoneError):
        scrape(f"http://127.0.0.1:{port}/metrics", 5)  # the server is gone: refused


def test_the_shipped_hook_returns_only_after_the_last_stream() -> None:
    """The pod's own command (python3 -c <the shipped text> PORT DEADLINE QUIET), with this interpreter."""
    state = {"running": 1, "waiting": 0, "finished": 0}
    with metrics_server(state) as port:
        command = [sys.executable, "-c", drain.script(), str(port), "120", "1", "-"]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(2)
            assert proc.poll() is None, "returned while a stream was still running"
            state.update(running=0, finished=1)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert proc.returncode == 0
    assert "drained after" in out, out
