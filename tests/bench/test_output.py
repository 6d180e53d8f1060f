"""What a person reads: tables that fit 80 columns (all of it with --wide), compare's warnings and units, plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvtier.bench.compare import compare, compare_lines
from kvtier.bench.plots import write_plots
from kvtier.bench.records import RequestRecord
from kvtier.bench.result import BenchResult
from kvtier.bench.terminal import Column, render, summary_lines
from kvtier.bench.testserver import Behaviour, FakeCluster
from kvtier.cli import main

PNG = b"\x89PNG\r\n\x1a\n"
LABEL = "prefix-aware-routing-on-the-standalone-router-with-a-long-name"


def _fits(lines: list[str]) -> None:
    for line in lines:
        # only a single unbreakable word (a long path or URL) may run past 80
        assert len(line) <= 80 or " " not in line.strip(), line


def test_piped_summary_fits_80_columns_and_keeps_labels_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quick = Behaviour(cold_s=0.1, warm_s=0.1, l2_s=0.1, itl_s=0.002, output_tokens=3)
    argv = ["--users", "3", "--rounds", "2", "--system-tokens", "32", "--user-tokens", "8", "--qps", "20"]
    argv += ["--percentiles", "50,90,99,99.9", "--slo", "ttft=500ms,tpot=50ms", "--label", LABEL, "--no-plots"]
    with FakeCluster(1, quick) as c:
        out = tmp_path / "narrow"
        assert main(["bench", "shared-prefix", "--url", c.urls[0], *argv, "--no-progress", "--out", str(out)]) == 0
        narrow = capsys.readouterr().out.splitlines()
        wide_out = tmp_path / "wide"
        argv += ["--wide", "--out", str(wide_out)]
        assert main(["bench", "shared-prefix", "--url", c.urls[0], *argv, "--no-progress"]) == 0
        wide = capsys.readouterr().out.splitlines()
    _fits(narrow)
    assert any(LABEL in line for line in narrow)  # the label is whole, never cut
    header = next(line for line in narrow if line.startswith("run "))
    assert "TTFT p50" in header and "p99.9" in header and "good" in header
    assert "good: requests meeting every SLO (ttft <= 500 ms, tpot <= 50 ms)" in " ".join(" ".join(narrow).split())
    wide_header = next(line for line in wide if line.startswith("run "))
    assert len(wide_header) > 80
    for column in ("TTFT p90", "TPOT p99.9", "ITL p99", "E2E mean", "out tok/s", "good/s"):
        assert column in wide_header
    result = json.loads((out / "result.json").read_text())
    summary = result["runs"][0]
    assert set(summary["ttft_ms"]) >= {"p50", "p90", "p99", "p99.9"}
    assert summary["goodput"]["slo_ms"] == {"ttft": 500.0, "tpot": 50.0}


def test_render_folds_long_labels_then_drops_optional_columns() -> None:
    columns = [Column("run", left=True), Column("a"), Column("b", optional=True)]
    long = "x" * 70
    lines = render(columns, [[long, "1" * 8, "2" * 8], ["short", "3", "4"]])
    assert long in lines and all(len(line) <= 80 for line in lines)  # the label got a line of its own
    too_wide = render(columns, [["r", "1" * 40, "2" * 40]])
    assert all(len(line) <= 80 for line in too_wide) and "--wide" in too_wide[-1]
    assert render(columns, [["r", "1" * 40, "2" * 40]], width=None)[2].endswith("2" * 40)


def _record(run: str, i: int, ttft: float | None, ok: bool = True, **tags: Any) -> RequestRecord:
    rec = RequestRecord(run, "http://pod", i, dict(tags), i * 100.0, ok=ok, ttft_ms=ttft)
    rec.e2e_ms = (ttft or 50.0) + 20
    if not ok:
        rec.error_kind, rec.error = "reset", "the connection was reset"
    return rec


def _result(workload: str, records: list[RequestRecord], **settings: Any) -> BenchResult:
    cache = [
        {
            "url": "http://pod-a",
            "tiers": {"l0_gpu_prefix_cache": {"hit_tokens": 50.0, "query_tokens": 200.0, "hit_rate": 0.25}},
            "l2_io": {"read_bytes": 3.0 * (1 << 20), "read_requests": 3.0},
            "notes": [],
        }
    ]
    return BenchResult(
        workload, "2026-12-01T00:00:00+00:00", 1.0, {"salt": "s", **settings}, [workload], records, cache
    )


def test_compare_warns_names_settings_and_shows_each_pod(tmp_path: Path) -> None:
    a = _result("shared-prefix", [_record("shared-prefix", i, 100.0 + i, round=1) for i in range(4)], qps=2.0)
    b = _result("shared-prefix", [_record("shared-prefix", i, 50.0 + i, round=1) for i in range(4)], qps=4.0)
    b.cache[0]["tiers"]["l0_gpu_prefix_cache"].update(hit_tokens=150.0, hit_rate=0.75)
    data = compare(a, b)
    assert data["settings_differences"] == [{"setting": "qps", "a": 2.0, "b": 4.0}]
    assert any("different settings: qps" in w for w in data["warnings"])
    rows = {(r["section"], r["metric"]): r for r in data["rows"]}
    hit = rows[("cache http://pod-a", "L0 GPU prefix cache hit %")]
    assert (hit["a"], hit["b"]) == (25.0, 75.0)  # percent, as in the summary
    assert rows[("cache http://pod-a", "L2 read MiB")]["a"] == 3.0
    trace = _result("trace", [_record("trace", 0, 10.0)])
    other = compare(a, trace)
    assert any("shared-prefix run and B a trace run" in w for w in other["warnings"])
    lines = compare_lines(other, ("a/result.json", "b/result.json"))
    _fits(lines)
    assert lines[2].startswith("warning: A is a shared-prefix run")


def test_summary_of_a_partial_sweep_with_failures_fits(tmp_path: Path) -> None:
    records = [_record("cold", 0, 400.0, length=500, repeat=1), _record("reused", 0, None, ok=False, length=500)]
    result = _result("sweep", records, write_url="http://a", read_url="http://b")
    result.details = {"sweep": [{"length": 500, "prompt_tokens": 500, "repeats": 1, "status": "read failed",
                                 "cold_ttft_ms": 400.0, "reused_ttft_ms": None, "speedup": None,
                                 "reused_error": "reset: the connection was reset"}]}  # fmt: skip
    result.interrupted = {"signal": "SIGTERM", "dropped_in_flight": 1}
    lines = summary_lines(result)
    _fits(lines)
    text = "\n".join(lines)
    assert "PARTIAL: interrupted by SIGTERM" in text and "read failed" in text
    assert "failed" in next(line for line in lines if line.startswith("500 "))


def test_trace_plots_draw_failures(tmp_path: Path) -> None:
    records = [_record("trace", i, 100.0 + 10 * i, line=i) for i in range(8)]
    records += [_record("trace", 8, None, ok=False, line=8), _record("trace", 9, None, ok=False, line=9)]
    files = write_plots(_result("trace", records), tmp_path)
    names = {f.name for f in files}
    assert {"latency_cdf.png", "timeline.png", "ttft_percentiles.png"} <= names
    for f in files:
        data = f.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000


def test_every_plot_title_names_the_run_label(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    titles: dict[str, str] = {}
    save = Figure.savefig

    def looked_at(fig: Figure, path: Path, **kwargs: Any) -> None:  # each figure's title, as it is written
        titles[path.name] = fig.axes[0].get_title()
        save(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", looked_at)
    trace = _result("trace", [_record("trace", i, 100.0 + i, line=i) for i in range(4)])
    trace.label = "roundrobin $5\x1b[31m"  # "$" must not start mathtext, the escape byte is shown escaped
    sweep = _result("sweep", [_record("cold", 0, 400.0, length=500)])
    sweep.details = {"sweep": [{"length": 500, "cold_ttft_ms": 400.0, "reused_ttft_ms": 100.0, "speedup": 4.0}]}
    sweep.label = "prefixaware"
    for folder in ("trace", "sweep", "unlabelled"):
        (tmp_path / folder).mkdir()
    write_plots(trace, tmp_path / "trace")
    write_plots(sweep, tmp_path / "sweep")
    assert set(titles) == {"latency_cdf.png", "timeline.png", "ttft_percentiles.png", "sweep_ttft.png"}
    for name in ("latency_cdf.png", "timeline.png", "ttft_percentiles.png"):
        assert titles[name].endswith("\nroundrobin \\$5\\x1b[31m"), titles[name]
    assert titles["sweep_ttft.png"].endswith("\nprefixaware")
    sweep.label = None
    write_plots(sweep, tmp_path / "unlabelled")
    assert "\n" not in titles["sweep_ttft.png"]  # no label: the title alone


def test_off_a_terminal_progress_is_plain_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CI log or a pipe cannot show a live bar: a plain line at the start and then at most every few seconds
    says how far the run is, so a long run never looks hung; --no-progress silences them."""
    from kvtier.bench import session

    monkeypatch.setattr(session, "PLAIN_EVERY_S", 0.0)
    quick = Behaviour(cold_s=0.05, warm_s=0.05, l2_s=0.05, itl_s=0.001, output_tokens=2)
    argv = ["--lengths", "50,60", "--settle-s", "0", "--no-plots", "--salt", "s1"]
    with FakeCluster(2, quick) as c:
        urls = ["--write-url", c.urls[0], "--read-url", c.urls[1]]
        assert main(["bench", "sweep", *urls, *argv, "--out", str(tmp_path / "a")]) == 0
        err = capsys.readouterr().err.splitlines()
        assert main(["bench", "sweep", *urls, *argv, "--out", str(tmp_path / "b"), "--no-progress"]) == 0
        quiet = capsys.readouterr().err
    assert err[0] == "sweep s1: sending 4 requests ..."
    assert err[-1].startswith("sweep s1: 4 of 4 requests done (")
    assert quiet == ""
