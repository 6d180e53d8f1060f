"""The client against the test server: connections reused, broken connections named, interrupts keep what finished.

The interrupt tests run `kvtier bench` in a real subprocess and send it a real signal; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtier.bench.records import Request, RequestRecord
from kvtier.bench.session import Session, Tracker
from kvtier.bench.testserver import Behaviour, FakeCluster
from kvtier.cli import main

QUICK = Behaviour(cold_s=0.1, l2_s=0.1, warm_s=0.1, itl_s=0.002, output_tokens=4)
REPO = Path(__file__).resolve().parents[2]


def _sweep(tmp_path: Path, url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "out"
    argv = ["bench", "sweep", "--write-url", url, "--settle-s", "0", "--no-progress", "--no-plots", "--out", str(out)]
    code = main([*argv, *extra])
    path = out / "result.json"
    return code, json.loads(path.read_text()) if path.exists() else {}


def test_one_connection_serves_every_request(tmp_path: Path) -> None:
    """Probe, scrapes, warm-up and 12 streamed requests share one TCP connection: no connect inside a TTFT."""
    with FakeCluster(1, QUICK) as c:
        code, result = _sweep(tmp_path, c.urls[0], "--lengths", "40,50,60", "--repeat", "2")
        server = c.servers[0]
        streamed = [e for e in server.log if e.request_id]
    assert code == 0
    assert len(result["requests"]) == 12 and len(streamed) == 13  # with the warm-up
    assert server.connections == 1


def test_a_server_without_keep_alive_still_works(tmp_path: Path) -> None:
    """The reuse needs nothing from the server: one that closes after each answer just costs a connect each."""
    with FakeCluster(1, Behaviour(cold_s=0.1, itl_s=0.002, output_tokens=2, keep_alive=False)) as c:
        code, result = _sweep(tmp_path, c.urls[0], "--lengths", "40", "--no-metrics")
        connections = c.servers[0].connections
    assert code == 0 and all(r["ok"] for r in result["requests"])
    assert connections == 4  # probe, warm-up, cold, reused


def test_a_connection_reset_is_named(tmp_path: Path) -> None:
    with FakeCluster(1, Behaviour(cold_s=0.1, itl_s=0.002, output_tokens=4, reset_after_chunks=2)) as c:
        code, result = _sweep(tmp_path, c.urls[0], "--lengths", "40", "--no-metrics", "--no-warmup")
    assert code == 1
    for r in result["requests"]:
        assert r["error_kind"] == "reset"
        assert "closed or reset the connection after 2 chunks of generated text" in r["error"]
        assert "ConnectionResetError" in r["error"] or "peer closed" in r["error"]
        assert r["ttft_ms"] is not None  # measured as far as it got
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "reset: " in summary


def _bench_process(url: str, out: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "kvtier", "bench", "shared-prefix", "--url", url, "--users", "50", "--rounds", "4"]
    argv += ["--system-tokens", "40", "--user-tokens", "8", "--question-tokens", "4", "--max-tokens", "2"]
    argv += ["--qps", "20", "--no-progress", "--no-plots", "--out", str(out), "--salt", "sig"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_PROXY": "*", "no_proxy": "*"}
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_writes_what_finished_and_exits_130(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "out"
    with FakeCluster(1, Behaviour(cold_s=0.1, warm_s=0.1, l2_s=0.1, itl_s=0.002, output_tokens=2)) as c:
        proc = _bench_process(c.urls[0], out)
        try:
            deadline = time.monotonic() + 60
            while c.servers[0].completed < 10:  # some answers went out (200 requests are planned)
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the benchmark sent nothing within 60 s"
                time.sleep(0.05)
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        sent = len([e for e in c.servers[0].log if e.request_id])
    assert proc.returncode == 130, stderr
    result = json.loads((out / "result.json").read_text())
    assert result["partial"] is True and result["interrupted"]["signal"] == sig.name
    finished = len(result["requests"])
    # 10 answers were complete on the server's side; at most --concurrency 8 of them were still being read
    assert 10 - 8 <= finished <= sent < 200
    # dropped: sent by the client and unfinished; some of them may not have reached the server yet
    assert sent <= finished + result["interrupted"]["dropped_in_flight"]
    assert all(r["ok"] for r in result["requests"])  # what finished is measured, not counted as failures
    assert result["runs"][0]["requests"] == finished
    assert "**Partial run**" in (out / "summary.md").read_text()
    assert "PARTIAL: interrupted by " + sig.name in stdout
    assert "marked partial" in stderr and "Traceback" not in stderr


def test_httpcore_finds_sniffio_so_a_lock_costs_no_failed_import() -> None:
    """httpcore asks sniffio which event loop runs at every connection-pool lock; without the package (anyio 4.16
    stopped requiring it) each lock re-ran a failing import. Pinned beside httpx in requirements-dev.txt."""
    import asyncio

    from httpcore._synchronization import current_async_library

    misses: list[str] = []

    class Watch:
        def find_spec(self, name: str, *_: object) -> None:
            if name == "sniffio":
                misses.append(name)

    async def twice() -> tuple[str, str]:
        return current_async_library(), current_async_library()

    asyncio.run(twice())  # the first import
    watch = Watch()
    sys.meta_path.insert(0, watch)
    try:
        assert asyncio.run(twice()) == ("asyncio", "asyncio")
    finally:
        sys.meta_path.remove(watch)
    assert misses == []  # imported once, then taken from sys.modules; a missing package is searched every time


def _requests(url: str, count: int) -> Iterator[Request]:
    from kvtier.bench.records import request_body

    for index in range(count):
        body = request_body("completions", "kvtier/fake-model", f"question {index} " * 20, 4)
        yield Request("load", url, "completions", body, index, scheduled_ms=0.0)


async def _schedule(
    url: str, count: int, concurrency: int, watch: Callable[[int, Session], None] | None = None
) -> Session:
    tracker = Tracker(False, "t")
    session = Session(timeout_s=30.0, tracker=tracker)
    async with session:

        def lazily() -> Iterator[Request]:
            for req in _requests(url, count):
                if watch is not None:
                    watch(req.index, session)
                yield req

        records = await session.schedule(lazily(), concurrency=concurrency)
        assert len(records) == count and all(r.ok for r in records)
    return session


def test_sixty_four_in_flight_reuse_their_connections() -> None:
    """256 streamed requests, 64 at a time, over at most 64 connections: each stream is read to its end, so its
    connection goes back to the pool and the next request takes it instead of connecting again."""
    with FakeCluster(1, Behaviour(cold_s=0.02, warm_s=0.02, l2_s=0.02, itl_s=0.002, output_tokens=4)) as c:
        asyncio.run(_schedule(c.urls[0], 256, 64))
        connections = c.servers[0].connections
    assert 1 <= connections <= 64, connections


def test_a_limited_schedule_reads_its_requests_only_as_slots_free() -> None:
    """A lazy schedule keeps at most `concurrency` + 1 request bodies alive (the trace replay's 12k bodies were
    built before the first send)."""
    ahead: list[int] = []

    def watch(pulled: int, session: Session) -> None:
        ahead.append(pulled - len(session.records))  # bodies made and not finished, besides the one being made

    with FakeCluster(1, Behaviour(cold_s=0.02, warm_s=0.02, l2_s=0.02, itl_s=0.002, output_tokens=2)) as c:
        asyncio.run(_schedule(c.urls[0], 64, 4, watch))
    assert max(ahead) <= 4, max(ahead)


def test_the_trace_replay_builds_each_body_when_it_is_due(tmp_path: Path) -> None:
    from kvtier.bench.prompts import PromptMaker
    from kvtier.bench.workloads import Context, TraceReplay
    from kvtier.trace import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": 600, "output_length": 1, "hash_ids": [i, 10_000 + i]}) + "\n"
            for i in range(50)
        )
    )
    replay = TraceReplay(url="http://127.0.0.1:9", path=path, requests=load_trace(path).requests, concurrency=2)
    built: list[int] = []

    class Lazy(Context):
        def body(self, text: Any, max_tokens: int) -> bytes:
            built.append(max_tokens)
            return super().body(text, max_tokens)

    class Watch:
        async def schedule(self, reqs: Iterable[Request], *, concurrency: int | None) -> list[RequestRecord]:
            first = next(iter(reqs))
            assert first.index == 0 and concurrency == 2
            assert len(built) == 1  # the other 49 bodies do not exist yet
            return []

    ctx = Lazy("m", "completions", PromptMaker(0, "s"))
    asyncio.run(replay.run(Watch(), ctx))  # type: ignore[arg-type]
    assert len(built) == 1


def test_a_client_that_falls_behind_is_measured_and_named_in_the_summary() -> None:
    """A busy client (here: 40 ms of blocking work before each send) wakes late; the session samples how late, and
    the summary warns that its TTFTs include that delay. An idle client draws no warning."""
    import dataclasses

    from kvtier.bench.result import BenchResult
    from kvtier.bench.stats import distribution
    from kvtier.bench.terminal import CLIENT_LAG_WARN_MS, summary_lines

    def busy(_pulled: int, _session: Session) -> None:
        time.sleep(0.04)

    with FakeCluster(1, Behaviour(cold_s=0.02, warm_s=0.02, l2_s=0.02, itl_s=0.002, output_tokens=2)) as c:
        saturated = asyncio.run(_schedule(c.urls[0], 24, 8, busy))
        idle = asyncio.run(_schedule(c.urls[0], 4, 8))
    assert max(saturated.loop_lag_ms) > CLIENT_LAG_WARN_MS
    base = BenchResult("shared-prefix", "2026-12-01T00:00:00+00:00", 1.0, {"salt": "s"}, ["shared-prefix"], [])
    warned = dataclasses.replace(base, details={"client_loop_lag_ms": distribution(saturated.loop_lag_ms)})
    text = "\n".join(summary_lines(warned, wide=True))
    assert "warning: the client was saturated: its event loop ran up to" in text
    quiet = dataclasses.replace(base, details={"client_loop_lag_ms": distribution(idle.loop_lag_ms or [0.0])})
    assert "saturated" not in "\n".join(summary_lines(quiet, wide=True))
