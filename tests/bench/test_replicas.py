"""`kvtier bench --router-metrics-url`: which replica served each request, from a router's per-replica counter.

The real router is exercised in tests/engine/test_real_router.py; here a local HTTP endpoint publishes the counter
the way vllm-router does (`vllm_router_processed_requests_total{worker="<url>"}`), counting what each test server
actually answered, so the bench's attribution logic runs end to end on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvtier.bench.records import RequestRecord
from kvtier.bench.replicas import replica_summary, single_mover
from kvtier.bench.result import BenchResult
from kvtier.bench.terminal import replica_lines
from kvtier.bench.testserver import Behaviour, FakeCluster
from kvtier.cli import main
from kvtier.serving import ROUTER_SERVED_METRIC


@contextmanager
def router_metrics(cluster: FakeCluster, *, broken: bool = False) -> Iterator[str]:
    """A router's Prometheus port for `cluster`: per worker URL, the completion requests that server received."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if broken:
                self.send_response(503)
                self.end_headers()
                return
            lines = [f"# TYPE {ROUTER_SERVED_METRIC} counter"]
            for server in cluster.servers:
                lines.append(f'{ROUTER_SERVED_METRIC}{{worker="{server.url}"}} {float(server.requests)}')
            body = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _sweep(tmp_path: Path, cluster: FakeCluster, metrics: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / "out"
    argv = ["bench", "sweep", "--write-url", cluster.urls[0], "--read-url", cluster.urls[1], "--lengths", "100,200"]
    code = main([*argv, "--router-metrics-url", metrics, "--no-progress", "--no-plots", "--out", str(out), *extra])
    assert code == 0
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result


def test_each_request_names_the_replica_that_served_it(tmp_path: Path) -> None:
    with FakeCluster(2) as cluster, router_metrics(cluster) as metrics:
        result = _sweep(tmp_path, cluster, metrics)
        write_url, read_url = cluster.urls
    served = {(r["run"], r["url"]): r["replica"] for r in result["requests"]}
    assert served and all(replica == url for (_, url), replica in served.items())
    assert {r["run"] for r in result["requests"]} == {"cold", "reused"}
    assert {r["replica"] for r in result["requests"]} == {write_url, read_url}
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Which replica served each request" in summary and write_url in summary


def test_unreadable_router_metrics_leave_the_replica_unknown(tmp_path: Path) -> None:
    with FakeCluster(2) as cluster, router_metrics(cluster, broken=True) as metrics:
        result = _sweep(tmp_path, cluster, metrics)
    assert result["requests"] and all(r["replica"] is None for r in result["requests"])


def test_single_mover() -> None:
    assert single_mover({"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 2.0}) == "a"
    assert single_mover({"a": 1.0}, {"a": 1.0, "b": 1.0}) == "b"  # a replica discovered meanwhile
    assert single_mover({"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 3.0}) is None  # two moved: another client
    assert single_mover({"a": 1.0}, {"a": 3.0}) is None  # two requests counted
    assert single_mover({"a": 1.0}, {"a": 1.0}) is None  # not counted (an error before routing)
    assert single_mover(None, {"a": 1.0}) is None


def test_replica_summary_counts_known_and_unknown() -> None:
    def record(replica: str | None) -> RequestRecord:
        return RequestRecord(run="r", url="u", index=0, tags={}, start_ms=0.0, replica=replica)

    assert replica_summary([record("a"), record("b"), record("a"), record(None)]) == {
        "per_replica": {"a": 2, "b": 1},
        "unknown": 1,
    }


def _free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_router_metrics_url_nobody_answers_is_named_not_called_an_overlap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    quick = Behaviour(cold_s=0.01, warm_s=0.01, l2_s=0.01, itl_s=0.001, output_tokens=2)
    argv = ["--users", "2", "--rounds", "1", "--system-tokens", "16", "--user-tokens", "8", "--concurrency", "1"]
    with FakeCluster(1, quick) as cluster:
        argv += ["--url", cluster.urls[0], "--router-metrics-url", dead, "--no-progress", "--no-plots"]
        assert main(["bench", "shared-prefix", *argv, "--out", str(tmp_path / "out")]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the summary, unwrapped
    assert f"router metrics could not be read at {dead}/metrics (ClientConnectorError" in text
    assert "--router-metrics-url" in text and "overlapped" not in text
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert f"router metrics could not be read at {dead}/metrics" in summary


def _result(error: str | None) -> BenchResult:
    records = [RequestRecord(run="r", url="u", index=i, tags={}, start_ms=0.0, replica=None) for i in range(2)]
    details = {"router_metrics_error": error} if error else {}
    settings = {"router_metrics_url": "http://router:9090"}
    return BenchResult("sweep", "2026-01-01T00:00:00+00:00", 1.0, settings, ["r"], records, details=details)


def test_replica_lines_tell_an_overlap_from_an_unreadable_counter() -> None:
    overlapped = " ".join(replica_lines(_result(None), None))
    assert "2 overlapped another request or were not counted (replica unknown)" in overlapped
    assert "could not be read" not in overlapped
    unread = " ".join(replica_lines(_result("HTTP 503"), None))
    assert "router metrics could not be read at http://router:9090/metrics (HTTP 503)" in unread
    assert "--router-metrics-url" in unread and "overlapped" not in unread
