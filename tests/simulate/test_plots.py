"""The simulator's PNGs as rendered by matplotlib from a real run on the shipped sample trace: the axes fit the
numbers (no fixed 0-100% axis for hit rates of a few percent, a labelled tick at 1-2-5 of every decade on a log axis),
and a sweep's per-strategy plots say which sizes they show."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main
from kvtier.simulate import SimConfig, Trace, TraceRequest, plots
from kvtier.simulate.elastic import ScalePolicy, simulate_elastic
from kvtier.simulate.plots import window_p90, write_elastic_plot
from tests.support import ROUND_COSTS, SAMPLE_TRACE, SAMPLE_WINDOW

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Each figure's axes as drawn, by file name (read just before it is saved and closed)."""
    seen: dict[str, dict[str, Any]] = {}
    save = plots._save

    def record(figure: Any, path: Path) -> Path:
        figure.canvas.draw()
        axes = figure.axes[0]
        labels = [t.get_text() for t in axes.get_yticklabels() if t.get_text()]
        low, high = axes.get_ylim()
        seen[path.name] = {"ylim": (low, high), "labels": labels, "title": axes.get_title(), "scale": axes.get_yscale()}
        return save(figure, path)

    monkeypatch.setattr(plots, "_save", record)
    # The trace's first 500 requests, whose low hit rates (7.5% at most) must not be drawn on a 0-100% axis.
    argv = ["simulate", "-e", "dev", "--lob", "retail", "--endpoint", "qwen3-8b", "--trace", str(SAMPLE_TRACE)]
    argv += ["--limit", str(SAMPLE_WINDOW)]
    assert main([*argv, "--l1-gib", "0", "5", "20", "80", "--out", str(tmp_path), "--json"]) == 0
    written = sorted(tmp_path.rglob("*.png"))
    assert [p.name for p in written] == ["hit-rate-per-tier.png", "hit-rate-vs-l1.png", "ttft.png"]
    assert all(p.read_bytes().startswith(PNG) for p in written)
    return seen


def test_hit_rate_axes_fit_a_few_percent(rendered: dict[str, dict[str, Any]]) -> None:
    # The trace's first 500 requests at the dev endpoint: at most 7.5% of their prompt tokens come from cache.
    for name in ("hit-rate-per-tier.png", "hit-rate-vs-l1.png"):
        low, high = rendered[name]["ylim"]
        assert low == 0 and 5 <= high <= 15, (name, high)


def test_a_log_ttft_axis_labels_1_2_5_of_every_decade(rendered: dict[str, dict[str, Any]]) -> None:
    ttft = rendered["ttft.png"]
    assert ttft["scale"] == "log"
    assert {"0.2", "0.5", "1", "2"} <= set(ttft["labels"]), ttft["labels"]


def test_a_sweeps_per_strategy_plots_name_the_sizes_they_show(rendered: dict[str, dict[str, Any]]) -> None:
    for name in ("hit-rate-per-tier.png", "ttft.png"):
        assert "at L1 0 GiB per replica (the first of the sweep)" in rendered[name]["title"]
    assert "first of the sweep" not in rendered["hit-rate-vs-l1.png"]["title"]


def test_percent_top() -> None:
    assert plots.percent_top([7.5, 3.0]) == pytest.approx(8.625)
    assert plots.percent_top([95.0]) == 100.0
    assert plots.percent_top([0.0]) == 5.0
    assert plots.percent_top([]) == 5.0


def test_window_p90_groups_arrivals_by_window() -> None:
    # Two windows of 10 s: TTFTs 1..10 in the first (numpy's linear p90: 9.1), one request in the third.
    served = [(float(i), float(i + 1)) for i in range(10)] + [(25.0, 4.0)]
    mids, p90s = window_p90(served, 10.0)
    assert mids == [5.0, 25.0]
    assert p90s == pytest.approx([9.1, 4.0])


def test_elastic_figure_is_written(tmp_path: Path) -> None:
    trace = Trace(tuple(TraceRequest(i * 250.0, 1536, 1, (1, 2, 1000 + i)) for i in range(400)))
    policy = ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20)
    model = dataclasses.replace(ROUND_COSTS, l2_tokens=10**12)
    runs = [
        (label, simulate_elastic(trace, m, SimConfig(routing="roundrobin"), policy))
        for label, m in (("on", model), ("off", ROUND_COSTS))
    ]
    path = write_elastic_plot(runs, tmp_path, "test")
    assert path == tmp_path / "elastic.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
