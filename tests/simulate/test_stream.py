"""The streaming replay (issue 40): several runs over one pass of the trace give exactly what a replay of the whole
trace in memory gives, the trace is parsed once, memory does not grow with its length beyond the TTFT sample, and a
trace out of time order (or from a pipe) is still replayed sorted."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import kvtier.trace as trace_module
from kvtier.cli import main
from kvtier.simulate import SimConfig, simulate
from kvtier.simulate.cache import LRU
from kvtier.simulate.result import TtftSample, summarize_ttft
from kvtier.simulate.routers import STRATEGIES
from kvtier.simulate.stream import OutOfOrderError, replay_sorted, replay_stream, units_bound
from kvtier.stats import percentile
from kvtier.trace import Row, load_trace, parse_rows
from tests.support import CONFIG_DIR, ROUND_COSTS

BLOCK = 512
MODEL = dataclasses.replace(ROUND_COSTS, replicas=3, l0_tokens=6 * BLOCK, l1_tokens=10 * BLOCK, l2_tokens=40 * BLOCK)


def _rows(count: int, seed: int = 0, *, adapters: bool = False) -> list[Row]:
    """Conversations that grow turn by turn, a shared system prompt, every 7th request cut inside a block."""
    rng = random.Random(seed)
    rows: list[Row] = []
    sessions: list[list[int]] = []
    fresh = 1000
    for line in range(1, count + 1):
        if not sessions or rng.random() < 0.3:
            sessions.append([0])
        history = rng.choice(sessions)
        history.extend(range(fresh, fresh + rng.randint(1, 3)))
        fresh += 3
        ids = tuple(history[-12:])
        tokens = len(ids) * BLOCK - (100 if line % 7 == 0 else 0)
        adapter = rng.choice([None, "faq", "billing"]) if adapters else None
        rows.append((line * 700.0, tokens, 1, ids, line, adapter))
    return rows


def _lines(rows: list[Row]) -> str:
    out = []
    for timestamp, tokens, output, ids, _, adapter in rows:
        row: dict[str, object] = {"timestamp": timestamp, "input_length": tokens, "output_length": output}
        row["hash_ids"] = list(ids)
        if adapter is not None:
            row["adapter"] = adapter
        out.append(json.dumps(row) + "\n")
    return "".join(out)


@pytest.mark.parametrize("adapters", [False, True])
def test_one_pass_over_every_strategy_equals_each_replayed_alone(tmp_path: Path, adapters: bool) -> None:
    rows = _rows(600, adapters=adapters)
    path = tmp_path / "t.jsonl"
    path.write_text(_lines(rows))
    sizes = [MODEL, dataclasses.replace(MODEL, l2_tokens=8 * BLOCK), dataclasses.replace(MODEL, chunk_tokens=1024)]
    runs = [
        (model, SimConfig(routing=r, l2_max_age_s=60.0, janitor_every_s=5.0)) for model in sizes for r in STRATEGIES
    ]
    streamed = replay_stream(trace_module.read_rows(path), runs, max_units=units_bound(path.stat().st_size))
    alone = [simulate(load_trace(path), model, config) for model, config in runs]
    assert streamed == alone
    assert any(r.hit_rate("l2_other") > 0 for r in alone) and any(r.skipped == 0 for r in alone)
    assert bool(alone[0].per_adapter) == adapters


def test_the_trace_is_parsed_once_for_all_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _rows(200)
    path = tmp_path / "t.jsonl"
    path.write_text(_lines(rows))
    parsed = 0
    real = trace_module._row

    def counting(*args: object) -> Row:
        nonlocal parsed
        parsed += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(trace_module, "_row", counting)
    runs = [(MODEL, SimConfig(routing=r)) for r in STRATEGIES]
    results = replay_stream(trace_module.read_rows(path), runs)
    assert parsed == len(rows) and {r.requests for r in results} == {len(rows)}


def _endless(count: int) -> Iterator[Row]:
    """Rows made on the fly, never held: what a file read one line at a time gives the replay."""
    for line in range(1, count + 1):
        base = (line // 5) * 10_000  # a conversation of 5 turns, then a new one
        ids = tuple(range(base, base + 3 + line % 5))
        yield (line * 20_000.0, len(ids) * BLOCK, 1, ids, line, None)  # 20 s apart: no queue builds up


def test_memory_with_bounded_tiers_does_not_grow_with_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TtftSample, "BLOCK", 1024)  # the sample sorts a block at a time: keep that transient small

    def peak(count: int) -> int:
        tracemalloc.start()
        try:
            replay_stream(_endless(count), [(MODEL, SimConfig(l2_max_age_s=600.0, janitor_every_s=30.0))])
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    short, long = peak(5_000), peak(40_000)
    # The TTFT sample is 8 bytes a served request; the trace itself (hundreds of bytes a request) is not held, nor
    # a list of every TTFT (32 bytes a request).
    assert long - short < 16 * 35_000, (short, long)


def test_a_trace_out_of_time_order_is_replayed_sorted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(300)
    shuffled = rows[:150] + rows[150:][::-1]
    path = tmp_path / "shuffled.jsonl"
    path.write_text(_lines(shuffled))
    with pytest.raises(OutOfOrderError) as caught:
        replay_stream(trace_module.read_rows(path), [(MODEL, SimConfig())])
    assert caught.value.line == 152
    assert replay_sorted(trace_module.read_rows(path), [(MODEL, SimConfig())]) == [
        simulate(load_trace(path), MODEL, SimConfig())
    ]
    ordered = tmp_path / "ordered.jsonl"
    ordered.write_text(_lines(sorted(rows, key=lambda r: r[0])))
    argv = ["simulate", "--config-dir", str(CONFIG_DIR), "--no-plots", "--json", "--routing", "roundrobin", "session"]
    assert main([*argv, "--trace", str(path)]) == 0
    out_of_order = json.loads(capsys.readouterr().out)
    assert main([*argv, "--trace", str(ordered)]) == 0
    expected = json.loads(capsys.readouterr().out)
    for report in (out_of_order, expected):
        report.pop("trace")
    assert out_of_order == expected


def test_a_trace_from_a_pipe_is_replayed_as_from_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _lines(_rows(200))
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    argv = ["simulate", "--config-dir", str(CONFIG_DIR), "--no-plots", "--json", "--routing", "kvaware"]
    assert main([*argv, "--trace", str(fifo)]) == 0
    piped = json.loads(capsys.readouterr().out)
    writer.join(timeout=10)
    assert main([*argv, "--trace", str(path)]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert piped["results"] == from_file["results"]


def test_a_bad_line_half_way_leaves_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_lines(_rows(50)) + "{not json}\n")
    out = tmp_path / "plots"
    assert main(["simulate", "--config-dir", str(CONFIG_DIR), "--trace", str(path), "--out", str(out)]) == 2
    assert f"{path}:51: not JSON" in capsys.readouterr().err
    assert not any(out.iterdir())  # the base folder may exist; the run's own folder is gone


def test_a_tier_that_holds_the_whole_trace_keeps_a_set_and_the_same_results() -> None:
    rows = _rows(400)
    roomy = dataclasses.replace(MODEL, l1_tokens=10**9 * BLOCK)
    runs = [(roomy, SimConfig(routing=r)) for r in STRATEGIES]
    as_sets = replay_stream(rows, runs, max_units=units_bound(10**6))
    as_lrus = replay_stream(rows, runs)
    assert as_sets == as_lrus
    assert isinstance(LRU(5, fits_all=True).entries, set) and not isinstance(LRU(0, fits_all=True).entries, set)
    assert units_bound(0) == float("inf")


def test_an_adapter_only_trace_reports_no_base_model() -> None:
    rows = [(i * 1000.0, BLOCK, 1, (1,), i + 1, "faq") for i in range(3)]
    (result,) = replay_stream(rows, [(MODEL, SimConfig())])
    assert set(result.per_adapter) == {"faq"}


@pytest.mark.parametrize("count", [0, 1, 2, 5, 1000, 5000])
def test_the_ttft_sample_gives_exactly_the_sorted_lists_percentiles(
    monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    monkeypatch.setattr(TtftSample, "BLOCK", 64)  # many blocks
    rng = random.Random(count)
    values = [rng.choice([0.0, 0.25, rng.expovariate(2.0), rng.uniform(0, 1e4)]) for _ in range(count)]
    summary = summarize_ttft(values)
    for q in (50, 90, 99):
        expected = percentile(values, q)
        assert (summary[f"p{q}"] == expected) if expected is not None else summary[f"p{q}"] != summary[f"p{q}"]
    if values:
        assert summary["max"] == max(values) and summary["mean"] == pytest.approx(sum(values) / count)


def test_ids_of_64_bits_or_more_are_refused_in_one_line() -> None:
    line = {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [2**64]}
    with pytest.raises(trace_module.TraceError, match=r"<trace>:1: hash id 18446744073709551616 is not a 64-bit id"):
        list(parse_rows([json.dumps(line)]))
    for ids in ([0, True], [1.0], [-1], ["1"]):
        with pytest.raises(trace_module.TraceError, match="hash_ids must be a list of integers >= 0"):
            list(parse_rows([json.dumps(line | {"hash_ids": ids})]))
    assert next(parse_rows([json.dumps(line | {"hash_ids": [2**64 - 1]})]))[3] == (2**64 - 1,)
