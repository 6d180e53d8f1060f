"""The simulator's PNGs as rendered by matplotlib from a real run on the shipped sample trace: the axes fit the
numbers (no fixed 0-100% axis for hit rates of a few percent, a labelled tick at 1-2-5 of every decade on a log axis),
and a sweep's per-strategy plots say which sizes they show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main
from kvtier.simulate import plots
from tests.support import ROOT

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
    trace = ROOT / "examples" / "traces" / "mooncake_synthetic_500.jsonl"
    argv = ["simulate", "-e", "dev", "--lob", "retail", "--endpoint", "qwen3-8b", "--trace", str(trace)]
    assert main([*argv, "--l1-gib", "0", "5", "20", "80", "--out", str(tmp_path), "--json"]) == 0
    written = sorted(tmp_path.rglob("*.png"))
    assert [p.name for p in written] == ["hit-rate-per-tier.png", "hit-rate-vs-l1.png", "ttft.png"]
    assert all(p.read_bytes().startswith(PNG) for p in written)
    return seen


def test_hit_rate_axes_fit_a_few_percent(rendered: dict[str, dict[str, Any]]) -> None:
    # The sample trace at the dev endpoint serves about 7.5% of its prompt tokens from cache.
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
