"""A real Prometheus scrapes the bench test server on 127.0.0.1 and evaluates kvtier's tier rules (optional part of
issue 13): every rule loads and evaluates healthy, and the tier shares follow the workload (1/3 cold, 1/3 from L2,
1/3 from the GPU cache)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from scripts.observability_demo import TIER_COLOURS, demo, instant, plot


def _prometheus() -> None:
    if shutil.which("prometheus") is None:
        message = "prometheus is not installed (apt-get install prometheus; `make test` does it)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must have it")
        pytest.skip(message)


def test_prometheus_evaluates_the_tier_rules_on_the_test_server(tmp_path: Path) -> None:
    _prometheus()
    said: list[str] = []
    with demo(rounds=8, pause_s=0.5, say=said.append) as run:
        figure = plot(run, tmp_path / "demo.png")
        rules = [r for g in run.rules for r in g["rules"]]
        assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
        sel = '{lob="demo", kvtier_endpoint="fake"}'
        l0 = instant(run.url, f"lob_endpoint:kvtier_l0_hit:ratio5m{sel}")
        l2 = instant(run.url, f"lob_endpoint:kvtier_l2_hit:ratio5m{sel}")
        l1 = instant(run.url, f"lob_endpoint:kvtier_l1_hit:ratio5m{sel}")
        cached = instant(run.url, f"lob_endpoint:kvtier_cached_prompt_tokens:ratio5m{sel}")
    assert l0 is not None and l2 is not None and l1 is not None and cached is not None
    # Each round: A cold, B from L2, A from its GPU cache (a third each, less the never-cached partial last block).
    # rate() extrapolates each series to its own scrape times, so the shares carry a margin.
    assert 0.2 < l0 < 0.45 and 0.2 < l2 < 0.45, (l0, l2)
    assert l1 < 0.05, l1  # the fake has no L1: what LMCache served came from L2
    assert abs(cached - (l0 + l2 + l1)) < 0.01
    # Issue 39: the demo said nothing for 36 s; now each step has a line, and the rounds as they go.
    assert said[0].startswith("starting Prometheus on 127.0.0.1:"), said
    assert "workload: round 5 of 8 sent" in said and "workload: round 8 of 8 sent" in said, said
    # Issue 39: one colour per tier in every panel (the default cycle gave L0 two colours in two panels).
    colours: dict[str, set[str]] = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            tier = str(line.get_label()).split(" ", 1)[0]
            colours.setdefault(tier, set()).add(str(line.get_color()))
    tiers = {t: c for t, c in colours.items() if t in TIER_COLOURS}
    assert set(tiers) == {"L0", "L1", "L2"} and all(len(c) == 1 for c in tiers.values()), colours
    assert len({next(iter(c)) for c in tiers.values()}) == 3, colours
