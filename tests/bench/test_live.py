"""`kvtier bench` end to end against real HTTP servers on 127.0.0.1 (kvtier.bench.testserver), started here.

The servers stream OpenAI-style SSE after a programmed delay (>= 100 ms: slower for a new prompt, faster for a
prefix in their own cache or in the store they share) and serve /metrics counters that move with the hits.
Timing checks are one-sided (measured TTFT >= programmed delay) plus an absolute margin of MARGIN_S above it,
generous for a loaded 2-core machine. No traffic leaves the machine.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvtier.bench.records import RequestRecord
from kvtier.bench.runner import RunOptions, run_workload
from kvtier.bench.testserver import Behaviour, FakeCluster, FakeServer, Logged
from kvtier.bench.workloads import TraceReplay
from kvtier.cli import main
from kvtier.serving import SESSION_HEADER
from kvtier.trace import load_trace

MARGIN_S = 0.5  # measured TTFT may exceed the programmed delay by at most this (scheduling, GIL, loopback)
# The sweep bounds its speedup with these delays; the other workloads run with shorter ones (>= 100 ms still).
SWEEP = Behaviour(cold_s=0.5, l2_s=0.2, warm_s=0.1, itl_s=0.005, output_tokens=4, block_words=16)
FAST = Behaviour(cold_s=0.25, l2_s=0.15, warm_s=0.1, itl_s=0.005, output_tokens=4, block_words=16)
PNG = b"\x89PNG\r\n\x1a\n"


@contextmanager
def cluster(count: int = 2, behaviour: Behaviour = FAST) -> Iterator[FakeCluster]:
    with FakeCluster(count, behaviour) as c:
        for url in c.urls:  # warm-up traffic, so /metrics counters do not start at zero
            with httpx.stream("POST", url + "/v1/completions", json={"prompt": "warm up " * 40, "stream": True}) as r:
                r.read()
        yield c


def _run(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "out"
    code = main(["bench", *argv, "--no-progress", "--out", str(out)])
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    return code, result


def _records(result: dict[str, Any]) -> list[RequestRecord]:
    return [RequestRecord.from_json(r) for r in result["requests"]]


def _logged(c: FakeCluster) -> dict[str, Logged]:
    return {entry.request_id: entry for server in c.servers for entry in server.log if entry.request_id}


def _request_id(result: dict[str, Any], rec: RequestRecord) -> str:
    return f"kvtier-bench-{result['settings']['salt']}-{rec.run}-{rec.index}"


def _assert_ttft_within_margin(result: dict[str, Any], c: FakeCluster) -> list[tuple[RequestRecord, Logged]]:
    logged = _logged(c)
    pairs = []
    for rec in _records(result):
        assert rec.ok, rec.error
        entry = logged[_request_id(result, rec)]
        assert rec.ttft_ms is not None
        assert rec.ttft_ms >= entry.delay_s * 1000, "TTFT below the programmed delay"
        assert rec.ttft_ms <= (entry.delay_s + MARGIN_S) * 1000, "TTFT beyond the stated margin"
        pairs.append((rec, entry))
    return pairs


def _counters(server: FakeServer) -> dict[str, float]:
    return dict(server.counters)


def test_sweep_cross_pod(tmp_path: Path) -> None:
    with cluster(2, SWEEP) as c:
        write, read = c.servers
        before = [_counters(s) for s in c.servers]
        code, result = _run(
            tmp_path,
            "sweep",
            "--write-url",
            write.url,
            "--read-url",
            read.url + "/v1/",
            "--lengths",
            "200,400",
            "--settle-s",
            "0",
        )
        after = [_counters(s) for s in c.servers]
        pairs = _assert_ttft_within_margin(result, c)
    assert code == 0
    by_run = {(rec.run, rec.index): entry for rec, entry in pairs}
    for i, length in enumerate((200, 400)):
        cold, reused = by_run[("cold", i)], by_run[("reused", i)]
        assert cold.delay_s == SWEEP.cold_s  # nothing cached anywhere: a new prompt
        assert reused.l2_hit == length - length % 16 and reused.local_hit == 0  # every full block from the shared store
        assert cold.words == reused.words and cold.body == reused.body  # byte-identical request
        assert cold.body["temperature"] == 0 and cold.body["max_tokens"] == 4
        row = result["details"]["sweep"][i]
        assert row["prompt_tokens"] == length  # from the server's usage
        # speedup = cold / reused, bounded by the programmed delays and the margin on either side
        assert (
            cold.delay_s / (reused.delay_s + MARGIN_S) <= row["speedup"] <= (cold.delay_s + MARGIN_S) / reused.delay_s
        )
        assert row["speedup"] == pytest.approx(row["cold_ttft_ms"] / row["reused_ttft_ms"])
    # metric deltas: exactly what the servers' counters moved during the run
    for report, b, a in zip(result["cache"], before, after, strict=True):
        tiers = report["tiers"]
        assert (
            tiers["l0_gpu_prefix_cache"]["hit_tokens"]
            == a["vllm:prefix_cache_hits_total"] - b["vllm:prefix_cache_hits_total"]
        )
        assert (
            tiers["l0_gpu_prefix_cache"]["query_tokens"]
            == a["vllm:prefix_cache_queries_total"] - b["vllm:prefix_cache_queries_total"]
        )
        assert (
            tiers["lmcache_l1_l2"]["hit_tokens"]
            == a["lmcache:num_lookup_hits_total"] - b["lmcache:num_lookup_hits_total"]
        )
        assert (
            report["l2_io"]["read_requests"]
            == a["lmcache:num_remote_read_requests_total"] - b["lmcache:num_remote_read_requests_total"]
        )
    # full 16-word blocks of both prompts came from the shared store on the read URL, none on the write URL
    assert result["cache"][1]["tiers"]["external_l1_l2"]["hit_tokens"] == 192 + 400
    assert result["cache"][0]["tiers"]["external_l1_l2"]["hit_tokens"] == 0
    out = tmp_path / "out"
    data = (out / "sweep_ttft.png").read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000
    assert not (out / "ttft_percentiles.png").exists()  # percentiles pooled over lengths would mislead
    summary = (out / "summary.md").read_text()
    assert "## Cold vs reused TTFT" in summary and "cannot be separated" in summary


def test_rerun_starts_cold_unless_the_salt_is_fixed(tmp_path: Path) -> None:
    with cluster(1) as c:
        url = c.urls[0]
        argv = ["sweep", "--write-url", url, "--lengths", "100", "--settle-s", "0", "--no-plots", "--no-metrics"]
        assert main(["bench", *argv, "--no-progress", "--out", str(tmp_path / "a"), "--salt", "fixed"]) == 0
        assert main(["bench", *argv, "--no-progress", "--out", str(tmp_path / "b")]) == 0
        assert main(["bench", *argv, "--no-progress", "--out", str(tmp_path / "c"), "--salt", "fixed"]) == 0
        # after the cluster's warm-up request, without each run's own warm-up (a prompt of its own)
        log = [e for e in c.servers[0].log[1:] if "-warmup-" not in (e.request_id or "")]
    # run a: cold then local hit; run b (new salt): cold again; run c (same salt as a): hit from the first request
    assert [e.local_hit for e in log] == [0, 96, 0, 96, 96, 96]


@pytest.mark.parametrize("shared_l2", [True, False])
def test_multiturn_read_pod_measures_l2_alone(tmp_path: Path, shared_l2: bool) -> None:
    """The read pod gets each conversation once, after all its turns, as a history it never saw: with a shared L2
    every full block comes from L2 (the full gain); without one it is cold (no gain, nothing reused locally)."""
    with FakeCluster(2, FAST, shared_l2=shared_l2) as c:
        write, read = c.servers
        code, result = _run(
            tmp_path,
            "multiturn",
            "--write-url", write.url,
            "--read-url", read.url,
            "--conversations", "3",
            "--turns", "3",
            "--system-tokens", "64",
            "--turn-tokens", "32",
            "--max-tokens", "3",
            "--settle-s", "0",
        )  # fmt: skip
        pairs = _assert_ttft_within_margin(result, c)
        read_log = list(read.log)
    assert code == 0
    writes = {(r.tags["conversation"], r.tags["turn"]): e for r, e in pairs if r.run == "write"}
    reads = {r.tags["conversation"]: (r, e) for r, e in pairs if r.run == "read"}
    assert len(read_log) == len(reads) == 3  # one read per conversation, nothing else reached the read pod
    for conv in range(3):
        for turn in (2, 3):
            prev, cur = writes[(conv, turn - 1)], writes[(conv, turn)]
            assert cur.words[: len(prev.words)] == prev.words  # history is the previous request, extended
            assert cur.body["messages"][-2]["role"] == "assistant" and cur.body["messages"][-2]["content"]
            assert cur.local_hit > 0  # the write pod reuses its own history
        rec, entry = reads[conv]
        turn = 3 - conv % 3
        assert rec.tags["turn"] == turn and result["details"]["read_turns"][str(conv)] == turn
        assert entry.body == writes[(conv, turn)].body  # byte-identical to what the write pod prefilled
        last = writes[(conv, 3)]
        assert entry.arrival >= last.arrival + last.delay_s  # only after the write pod finished every turn
        assert entry.local_hit == 0  # never served from the read pod's own cache
        full_blocks = len(entry.words) - len(entry.words) % FAST.block_words
        if shared_l2:
            assert entry.l2_hit == full_blocks > 0  # the full gain: every full block from L2
        else:
            assert entry.l2_hit == 0 and entry.delay_s == FAST.cold_s  # no gain at all
    reads_at = {row["turn"]: row["reads"] for row in result["details"]["turns"]}
    assert reads_at == {1: 1, 2: 1, 3: 1}  # every history length read once
    png = (tmp_path / "out" / "multiturn_ttft.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 10_000


def test_shared_prefix_paces_and_shares_the_system_prompt(tmp_path: Path) -> None:
    with cluster(1) as c:
        code, result = _run(
            tmp_path,
            "shared-prefix",
            "--url", c.urls[0],
            "--users", "4",
            "--rounds", "2",
            "--system-tokens", "160",
            "--user-tokens", "32",
            "--question-tokens", "8",
            "--qps", "20",
            "--concurrency", "4",
            "--no-plots",
        )  # fmt: skip
        pairs = _assert_ttft_within_margin(result, c)
    assert code == 0
    records = [r for r, _ in pairs]
    assert len(records) == 8
    for rec in records:
        assert rec.scheduled_ms is not None and rec.start_ms >= rec.scheduled_ms  # never sent early
    entries = sorted((e for _, e in pairs), key=lambda e: e.arrival)
    assert all(e.local_hit >= 160 for e in entries[1:])  # every later request hits the shared system prompt
    assert {e.user for e in entries} == {"user-0", "user-1", "user-2", "user-3"}
    starts = sorted(r.scheduled_ms for r in records if r.scheduled_ms is not None)
    assert [round(b - a, 6) for a, b in itertools.pairwise(starts)] == [50.0] * 7  # 1 / 20 QPS


def test_shared_prefix_sends_by_default_the_header_the_standalone_router_hashes() -> None:
    from kvtier.cli import build_parser
    from kvtier.k8s.router import router_args
    from kvtier.rules import load_checked
    from tests.support import CONFIG_DIR

    args = build_parser().parse_args(["bench", "shared-prefix", "--url", "http://127.0.0.1:8000"])
    endpoint = load_checked(CONFIG_DIR, "dev").lobs[0].endpoints[0]
    session = endpoint.model_copy(update={"routing": "session", "mode": "standalone"})
    flags = router_args("retail", session)
    # consistent_hash keys on x-session-id first (vllm-router's hash_key.rs); the real-router test proves it sticks.
    assert flags[flags.index("--policy") + 1] == "consistent_hash"
    assert args.user_header == SESSION_HEADER == "x-session-id"


def test_trace_replay_time_scaled(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [1, 2, 3]},
        {"timestamp": 300, "input_length": 24, "output_length": 2, "hash_ids": [1, 2, 4]},
        {"timestamp": 300, "input_length": 16, "output_length": 2, "hash_ids": [5, 6]},
        {"timestamp": 200, "input_length": 28, "output_length": 2, "hash_ids": [1, 2, 3, 7]},  # out of file order
        {"timestamp": 900, "input_length": 500, "output_length": 2, "hash_ids": list(range(8, 71))},  # too long
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with cluster(1) as c:
        replay = TraceReplay(
            url=c.urls[0],
            path=path,
            requests=load_trace(path, block_tokens=8).requests,
            time_scale=0.5,
            max_model_len=100,
            block_tokens=8,
        )
        before = time.perf_counter()
        result = run_workload(replay, RunOptions(api="completions", salt="t", progress=False, timeout_s=10))
        log = {e.request_id: e for e in c.servers[0].log if e.request_id}
    assert result.details["skipped_over_max_model_len"] == 1 and result.details["replayed"] == 4
    recs = result.records
    lines = [r.tags["line"] for r in sorted(recs, key=lambda r: r.start_ms)]
    assert lines == [1, 4, 2, 3]  # by timestamp, file order breaking the tie
    first = min(r.scheduled_ms or 0 for r in recs)
    for rec in recs:
        assert rec.ok, rec.error
        assert rec.scheduled_ms is not None
        assert rec.scheduled_ms - first == pytest.approx(rec.tags["timestamp_ms"] * 0.5)
        assert rec.start_ms >= rec.scheduled_ms
        entry = log[f"kvtier-bench-t-trace-{rec.index}"]
        assert entry.arrival - before >= rec.tags["timestamp_ms"] * 0.5 / 1000  # one-sided: never early
        assert len(entry.words) == rec.tags["input_length"] == rec.prompt_tokens
    words = {rec.tags["line"]: log[f"kvtier-bench-t-trace-{rec.index}"].words for rec in recs}
    assert words[2][:16] == words[1][:16] and words[2][16:] != words[1][16:20]
    assert words[4][:20] == words[1]  # ids 1, 2 and the start of 3 ...
    assert words[4][20:24] != words[2][16:20]  # ... then the rest of block 3, not block 4
    assert words[3][:8] != words[1][:8]
    # reuse the trace itself promises: line 4 repeats blocks 1-3 (24 tokens), line 2 blocks 1-2 (16)
    assert result.details["reusable_prefix_tokens"] == 24 + 16
    assert log[f"kvtier-bench-t-trace-{lines.index(2)}"].local_hit == 16  # the server saw that reuse


def test_sweep_repeats_with_fresh_salts_after_a_warm_up(tmp_path: Path) -> None:
    with cluster(2, FAST) as c:
        write, read = c.servers
        skip = [len(write.log), len(read.log)]  # the cluster's own warm-up traffic
        code, result = _run(
            tmp_path, "sweep", "--write-url", write.url, "--read-url", read.url,
            "--lengths", "64,96", "--repeat", "3", "--settle-s", "0", "--no-plots",
        )  # fmt: skip
        logs = [s.log[n:] for s, n in zip(c.servers, skip, strict=True)]
        pairs = _assert_ttft_within_margin(result, c)
    assert code == 0
    # one warm-up per URL, before any measured request, sharing no prefix with them
    for log in logs:
        assert "-warmup-" in (log[0].request_id or "") and log[0].local_hit == log[0].l2_hit == 0
    assert [w["ok"] for w in result["details"]["warmup"]] == [True, True]
    cold = [(r, e) for r, e in pairs if r.run == "cold"]
    assert len(cold) == 6 and all(e.local_hit == e.l2_hit == 0 for _, e in cold)  # every repeat starts cold
    assert len({" ".join(e.words) for _, e in cold}) == 6  # a fresh salt each time
    salts = {r.tags["repeat"]: e.words[3] for r, e in cold}  # "[kvtier bench run <salt> ..."
    salt = result["settings"]["salt"]
    assert salts == {1: salt, 2: f"{salt}-r2", 3: f"{salt}-r3"}
    # percentiles per length, never pooled over lengths
    runs = {r["name"]: r for r in result["runs"]}
    assert "ttft_ms" not in runs["cold"]
    for group in runs["cold"]["by_length"]:
        mine = sorted(r.ttft_ms or 0.0 for r, _ in cold if r.tags["length"] == group["length"])
        assert group["requests"] == 3
        assert group["ttft_ms"]["p50"] == mine[1] and group["ttft_ms"]["max"] == mine[2]
    for row in result["details"]["sweep"]:
        ttfts = sorted(r.ttft_ms or 0.0 for r, _ in cold if r.tags["length"] == row["length"])
        assert row["repeats"] == 3 and row["status"] == "ok"
        assert row["cold_ttft_ms"] == ttfts[1]  # the median of the three
        assert row["cold_ttft_spread_ms"] == {"min": ttfts[0], "max": ttfts[2]}
        assert row["speedup_spread"]["min"] <= row["speedup"] <= row["speedup_spread"]["max"]
    # req/s counts time with a request in flight: the settle pauses and the warm-ups are not in it
    for run in ("cold", "reused"):
        records = [r for r, _ in pairs if r.run == run]
        busy = sum(r.e2e_ms or 0 for r in records) / 1000  # sequential: no overlap
        assert runs[run]["request_throughput"] == pytest.approx(6 / busy)


def test_shared_prefix_for_a_duration_with_poisson_arrivals(tmp_path: Path) -> None:
    with cluster(1) as c:
        code, result = _run(
            tmp_path, "shared-prefix", "--url", c.urls[0], "--users", "3", "--rounds", "1",
            "--system-tokens", "32", "--user-tokens", "8", "--question-tokens", "4",
            "--qps", "8", "--arrival", "poisson", "--duration", "1.5", "--concurrency", "16",
        )  # fmt: skip
    assert code == 0
    records = _records(result)
    scheduled = sorted(r.scheduled_ms for r in records if r.scheduled_ms is not None)
    first = scheduled[0]
    assert all(at - first < 1500 for at in scheduled)  # nothing scheduled after the duration
    assert len(records) > 3  # rounds went on past --rounds 1 until the duration ended
    assert {r.tags["user"] for r in records} == {0, 1, 2}
    gaps = [b - a for a, b in itertools.pairwise(scheduled)]
    assert len({round(g, 3) for g in gaps}) > 1  # random gaps, not a fixed rate
    out = tmp_path / "out"
    for name in ("latency_cdf.png", "timeline.png"):
        assert (out / name).read_bytes().startswith(PNG)
