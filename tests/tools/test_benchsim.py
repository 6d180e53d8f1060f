"""tools/benchsim.py: the simulator's memory grows at most linearly with the trace (what bench-sim reports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.simulate.engine import SimConfig
from kvtier.trace import load_trace
from tests.support import SAMPLE_TRACE, SAMPLE_WINDOW
from tools import barereplay
from tools.benchsim import (
    DEFAULT_TRACE,
    SCALE_REPLICAS,
    UNBOUNDED,
    bare_argv,
    kvtier_argv,
    peak_bytes,
    process_cost,
    ratio_cell,
    scale_model,
    tiled,
    write_scaled,
)


def test_memory_of_a_replay_grows_at_most_linearly_with_the_trace() -> None:
    # The trace's first requests: tracemalloc makes the whole trace (and four copies of it) take 14 s instead of 1.5.
    trace = load_trace(SAMPLE_TRACE, limit=SAMPLE_WINDOW)
    config = SimConfig(l2_max_age_s=24 * 3600.0, janitor_every_s=300.0)
    one, four = peak_bytes(tiled(trace, 1), config), peak_bytes(tiled(trace, 4), config)
    assert len(tiled(trace, 4)) == 4 * len(trace)
    assert four <= 4.5 * one, (one, four)  # bounded tiers: the caches stop growing, the per-request state does not


# ---- production-size traces (issue 40) ----------------------------------------------------------------------------


def test_scaled_traces_are_copies_with_fresh_ids_cut_at_the_size(tmp_path: Path) -> None:
    source = tmp_path / "t.jsonl"
    source.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}\n'
        '{"timestamp": 500, "input_length": 100, "output_length": 2, "hash_ids": [0]}\n'
    )
    out = tmp_path / "scaled.jsonl"
    assert write_scaled(source, 5, out) == 5
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0, 500, 1500, 2000, 3000]
    assert [r["hash_ids"] for r in rows] == [[0, 1], [0], [2, 3], [2], [4, 5]]
    assert [r["output_length"] for r in rows] == [1, 2, 1, 2, 1]
    assert len(load_trace(out)) == 5  # a valid trace


def test_the_bare_replay_gets_the_same_tiers_as_the_simulator(tmp_path: Path) -> None:
    model, age = scale_model()
    bounded = bare_argv(tmp_path / "t", model, unbounded=False, max_age_s=age)
    assert bounded[bounded.index("--l0-units") + 1] == str(model.l0_tokens // 512)
    assert bounded[bounded.index("--l1-units") + 1] == str(model.l1_tokens // 512)
    assert bounded[bounded.index("--l2-units") + 1] == str(model.l2_tokens // 512)
    assert "--l1-units" not in bare_argv(tmp_path / "t", model, unbounded=True, max_age_s=age)
    assert model.replicas == SCALE_REPLICAS and age == 24 * 3600.0
    assert kvtier_argv(tmp_path / "t", ["roundrobin"], unbounded=True)[-4:] == list(UNBOUNDED)


def test_a_process_is_measured_alone_not_with_its_parents_memory(tmp_path: Path) -> None:
    """The benchmark process holds tens of MB; a child's peak must not include them (tools/peakrss.py)."""
    ballast = bytearray(200 << 20)  # this process: 200 MB more than a bare python
    cost = process_cost(["tools.barereplay", str(DEFAULT_TRACE), "--l0-units", "10", "--replicas", "2"])
    assert ballast and cost.peak_bytes < 100 << 20 and cost.cpu_s > 0 and cost.wall_s >= cost.cpu_s * 0.1
    with pytest.raises(RuntimeError, match="exited 2"):
        process_cost(["tools.barereplay", str(tmp_path / "missing.jsonl")])


def test_ratios_over_the_goal_are_bold() -> None:
    assert ratio_cell(1.5, 2.0) == "1.50x" and ratio_cell(2.01, 2.0) == "**2.01x**"


def test_the_bare_replay_counts_the_hit_rule_by_hand(tmp_path: Path) -> None:
    """Two replicas in turn, a minute apart: r0 -> 0 (cold), r1 -> 1 (1,2 from L2), r2 -> 0 (1,2 its own, 3 from L2, 4 new), r3 -> 1
    (1,2,3 its own): 8 of 12 blocks hit."""
    trace = tmp_path / "t.jsonl"
    rows = [[1, 2], [1, 2, 3], [1, 2, 3, 4], [1, 2, 3]]
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i * 60_000, "input_length": 512 * len(ids), "output_length": 1, "hash_ids": ids})
            + "\n"
            for i, ids in enumerate(rows)
        )
    )
    assert barereplay.replay(str(trace), 2, 100, None, None, 16384, 3600.0) == pytest.approx(8 / 12)
    # One block of L0 and L1 (the prefix head, stored last, survives) and an L2 of one block, which every 30 s sweep
    # (the requests are 60 s apart) trims to none: r2 and r3 hit block 1 alone.
    assert barereplay.replay(str(trace), 2, 1, 1, 1, 16384, 3600.0) == pytest.approx(2 / 12)
