"""tools/benchsim.py: the simulator's memory grows at most linearly with the trace (what bench-sim reports)."""

from __future__ import annotations

from kvtier.simulate.engine import SimConfig
from kvtier.trace import load_trace
from tests.support import SAMPLE_TRACE, SAMPLE_WINDOW
from tools.benchsim import peak_bytes, tiled


def test_memory_of_a_replay_grows_at_most_linearly_with_the_trace() -> None:
    # The trace's first requests: tracemalloc makes the whole trace (and four copies of it) take 14 s instead of 1.5.
    trace = load_trace(SAMPLE_TRACE, limit=SAMPLE_WINDOW)
    config = SimConfig(l2_max_age_s=24 * 3600.0, janitor_every_s=300.0)
    one, four = peak_bytes(tiled(trace, 1), config), peak_bytes(tiled(trace, 4), config)
    assert len(tiled(trace, 4)) == 4 * len(trace)
    assert four <= 4.5 * one, (one, four)  # bounded tiers: the caches stop growing, the per-request state does not
