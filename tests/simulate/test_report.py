"""What `kvtier simulate` tells its reader: skipped token share, crowded replicas, L1/L2 sizing answers, plots (log
TTFT axis, labelled sweeps), one folder per run, one unit per size, and L2 loads sharing a node's NIC."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kvtier.catalog import GB, GIB
from kvtier.cli import main
from kvtier.simulate import SimConfig, Trace, TraceRequest, simulate
from kvtier.simulate import plots as plots_module
from kvtier.simulate.report import crowding_warnings, notes, print_report, sizing
from kvtier.simulate.result import ReplicaLoad, SimResult, TierTokens
from tests.support import CONFIG_DIR, ROUND_COSTS

BIG = 10**12
MODEL = dataclasses.replace(ROUND_COSTS, replicas=2, max_model_len=2048)


def _trace(*rows: tuple[float, int, tuple[int, ...]]) -> Trace:
    return Trace(tuple(TraceRequest(t * 1000.0, n, 1, blocks) for t, n, blocks in rows), 512, "t")


def _result(routing: str = "roundrobin", hit: float = 0.5, **extra: float) -> SimResult:
    hits = round(1000 * hit)
    return SimResult(
        routing=routing, replicas=2, slots=1, seed=0, qps_scale=1.0, unit_tokens=512, l0_tokens=1, l1_tokens=1,
        l2_tokens=1, requests=10, served=10, skipped=0, skipped_tokens=0, tokens=TierTokens(l0=hits, miss=1000 - hits),
        ttft_s={"p50": 0.1, "p90": 0.2, "p99": 0.3, "mean": 0.1, "max": 0.3}, per_replica=(), makespan_s=1.0,
        extra=dict(extra),
    )  # fmt: skip


def test_the_headline_gives_the_share_of_prompt_tokens_the_skipped_requests_held() -> None:
    # Two short requests (1,000 tokens each) served, one long (6,000) skipped: 1 of 3 requests, 75% of the tokens.
    trace = _trace((0, 1000, (1, 2)), (1, 1000, (3, 4)), (2, 6000, tuple(range(10, 22))))
    result = simulate(trace, MODEL, SimConfig())
    assert (result.skipped, result.skipped_tokens) == (1, 6000)
    assert result.skipped_token_share == pytest.approx(0.75)
    (line, *_) = notes([result], MODEL)
    assert line.startswith("skipped 1 of 3 requests (33.3%), holding 75.0% of the trace's prompt tokens")


def test_a_crowded_replica_warns_with_the_flag_that_fixes_it() -> None:
    """Every prompt shares its first block: prefix-aware routing without a minimum match sends all of them after the
    first (as production-stack does); --prefix-min-match spreads them."""
    rows = [(float(i), 1536, (7, 100 + 3 * i, 101 + 3 * i)) for i in range(12)]
    crowded = simulate(_trace(*rows), MODEL, SimConfig(routing="prefixaware"))
    assert crowded.busiest_share > 0.5
    (warning,) = crowding_warnings([crowded])
    assert "prefixaware sent" in warning and "of the requests to one of 2 replicas" in warning
    assert "--prefix-min-match TOKENS" in warning
    spread = simulate(_trace(*rows), MODEL, SimConfig(routing="prefixaware", prefix_min_match_tokens=1024))
    assert spread.busiest_share <= 0.5 and crowding_warnings([spread]) == []
    # Two replicas splitting 51/49 are not crowded (the shipped trace's session routing does that).
    near_even = dataclasses.replace(crowded, per_replica=(ReplicaLoad(51, 1.0), ReplicaLoad(49, 1.0)))
    assert crowding_warnings([near_even]) == []


def test_sizing_names_the_smallest_size_within_one_point_of_the_best() -> None:
    results = [_result(hit=0.50, l1_gib=10), _result(hit=0.595, l1_gib=20), _result(hit=0.60, l1_gib=40)]
    (answer,) = sizing(results)
    assert (answer["size"], answer["smallest"], answer["best"]) == ("l1_gib", 20.0, 40.0)
    assert "L1 sizing (roundrobin): 20 GiB reaches 59.5%, within 1 point of the best (60.0% at 40 GiB)" in notes(
        results, MODEL
    )
    # 1.1 points short is not within one point.
    (answer,) = sizing([_result(hit=0.489, l2_gb=100), _result(hit=0.50, l2_gb=200)])
    assert answer["smallest"] == 200.0


def test_the_ttft_plot_uses_a_log_axis_when_values_span_more_than_10x(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scales: list[str] = []
    ticks: list[list[str]] = []
    real_save = plots_module._save

    def spy(figure: Any, path: Path) -> Path:
        axes = figure.axes[0]
        scales.append(axes.get_yscale())
        ticks.append([t.get_text() for t in axes.get_xticklabels()])
        return real_save(figure, path)

    monkeypatch.setattr(plots_module, "_save", spy)
    even = _result(l2_gb=0)
    spread = dataclasses.replace(even, ttft_s={"p50": 0.05, "p90": 0.4, "p99": 2.0, "mean": 0.2, "max": 2.0})
    plots_module.write_plots([even], tmp_path / "a", "t")
    assert scales[1] == "linear"  # 0.1 to 0.3 s
    scales.clear()
    ticks.clear()
    sweep = [
        spread,
        dataclasses.replace(spread, extra={"l2_gb": 50.0}),
        dataclasses.replace(spread, extra={"l2_gb": 1600.0}),
    ]
    written = plots_module.write_plots(sweep, tmp_path / "b", "t")
    assert scales[1] == "log"  # 0.05 to 2 s: 40x
    assert [p.name for p in written] == ["hit-rate-per-tier.png", "ttft.png", "hit-rate-vs-l2.png"]
    assert ticks[2] == ["0", "50", "1,600"]  # every swept size is a labelled tick, uneven sizes included


def test_each_run_writes_its_own_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}) + "\n")
    args = ["simulate", "--config-dir", str(CONFIG_DIR), "--trace", str(trace), "--routing", "roundrobin"]
    out = tmp_path / "out"
    assert main([*args, "--out", str(out), "--json"]) == 0
    first = Path(json.loads(capsys.readouterr().out)["out"])
    stamp = (first / "ttft.png").stat().st_mtime_ns
    assert main([*args, "--out", str(out), "--json"]) == 0
    second = Path(json.loads(capsys.readouterr().out)["out"])
    assert first != second and first.parent == second.parent == out
    assert (first / "ttft.png").stat().st_mtime_ns == stamp  # the first run's plots are untouched
    assert sorted(p.name for p in second.iterdir()) == ["hit-rate-per-tier.png", "ttft.png"]


def test_one_unit_per_size_in_flags_headers_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """L1 is GiB (LMCache's unit, cache.l1_gb) and L2 decimal GB (l2.budget_gb) in flags, table headers and JSON."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}) + "\n")
    base = ["simulate", "--config-dir", str(CONFIG_DIR), "--trace", str(trace), "--routing", "roundrobin", "--no-plots"]
    kv = 147_456  # Qwen3-8B
    assert main([*base, "--l1-gib", "1", "2", "--l2-gb", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["units"] == {"l1": "GiB", "l2": "GB", "ttft": "s"}
    assert [r["l1_tokens"] for r in data["results"]] == [int(GIB // kv), int(2 * GIB // kv)]
    assert {r["l2_tokens"] for r in data["results"]} == {GB // (256 * kv + 28) * 256}  # whole LMCache files
    assert [r["extra"]["l1_gib"] for r in data["results"]] == [1.0, 2.0]
    assert main([*base, "--l1-gib", "1", "2"]) == 0
    table = capsys.readouterr().out
    assert "L1 GiB" in table and "L1 sizing (roundrobin)" in table
    assert main([*base, "--l2-gb", "1", "2"]) == 0
    assert "L2 GB" in capsys.readouterr().out
    # The old flag name still works, means the same GiB, and says so.
    assert main([*base, "--l1-gb", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert "--l1-gb is deprecated: its value is GiB" in captured.err
    assert json.loads(captured.out)["results"][0]["l1_tokens"] == int(GIB // kv)


def test_the_report_fits_80_columns() -> None:
    results = [
        dataclasses.replace(_result(routing, 0.4, l2_gb=size), replicas=16)
        for routing in ("roundrobin", "session", "prefixaware", "kvaware")
        for size in (0.0, 1600.0)
    ]
    console = Console(width=80, record=True, file=io.StringIO())
    print_report(console, "dev/retail/qwen3-8b on a-long-trace-name.jsonl (x1 rate, seed 0)", MODEL, results, "kvaware")
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text and "kvaware*" in text and "1,600" in text


def test_concurrent_l2_loads_on_one_node_share_its_nic() -> None:
    """One replica with two prefill slots: a request writes a prompt's KV to L2; later two requests with that prompt
    start together and both load it from L2 over the node's NIC: the second at half the bandwidth."""
    model = dataclasses.replace(MODEL, replicas=1, l0_tokens=0, l2_tokens=BIG, l2_hit_fixed_s=0.05, max_model_len=BIG)
    blocks = (1, 2, 3, 4)
    tokens = 2048
    alone = simulate(_trace((0, tokens, blocks), (100, tokens, blocks)), model, SimConfig(slots=2))
    pair = simulate(
        _trace((0, tokens, blocks), (100, tokens, blocks), (100, tokens, blocks)), model, SimConfig(slots=2)
    )
    cold = model.prefill_seconds(tokens)
    last = cold - model.prefill_seconds(tokens - 1)
    one = model.l2_load_seconds(tokens - 1) + last  # LMCache loads all but the last token, which vLLM computes
    assert alone.ttft_s["mean"] == pytest.approx((cold + one) / 2)
    two = model.l2_load_seconds(tokens - 1, readers=2) + last
    assert two - one == pytest.approx((tokens - 1) * model.l2_load_s_per_token)  # the second reader at half speed
    assert pair.ttft_s["mean"] == pytest.approx((cold + one + two) / 3)
