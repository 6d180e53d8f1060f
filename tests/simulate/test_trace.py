"""The simulator on the Mooncake synthetic trace (reuse, length cap, determinism, speed) and the property that a
larger LRU tier never lowers the hit rate under load-blind routing."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.planner.model import TierModel
from kvtier.simulate import STRATEGIES, SimConfig, Trace, TraceRequest, load_trace, simulate
from kvtier.simulate.trace import to_units
from tests.support import SAMPLE_TRACE, SAMPLE_WINDOW

MOONCAKE_SYNTHETIC_REUSE = 0.66  # Mooncake FAST'25 Table 2, "Cache Ratio" of the synthetic trace
BIG = 10**12
UNBOUNDED = TierModel(
    kv_bytes_per_token=147_456,
    chunk_tokens=256,
    block_tokens=16,
    replicas=1,
    l0_tokens=BIG,
    l1_tokens=BIG,
    l2_tokens=BIG,
    l1_load_s_per_token=7e-6,
    l2_load_s_per_token=6e-5,
    prefill_s_per_token=9e-5,
    prefill_s_per_token_squared=1.6e-9,
    max_model_len=BIG,
)
# Sized like the example endpoint (Qwen3-8B on an L40S): hand-set, not the planner's numbers.
EXAMPLE = dataclasses.replace(
    UNBOUNDED, replicas=2, l0_tokens=160_000, l1_tokens=135_000, l2_tokens=1_350_000, max_model_len=16_384
)


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE_TRACE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def trace() -> Trace:
    return load_trace(SAMPLE_TRACE)


@pytest.fixture(scope="module")
def sample() -> Trace:
    """The trace's first requests: enough for the properties below, at an eighth of the whole trace's time."""
    return load_trace(SAMPLE_TRACE, limit=SAMPLE_WINDOW)


def prefix_reuse(rows: list[dict[str, Any]], block: int = 512) -> tuple[int, int]:
    """Tokens of each request covered by its longest prefix of blocks seen before (in time order), and all tokens."""
    seen: set[int] = set()
    hit = total = 0
    for row in sorted(rows, key=lambda r: r["timestamp"]):
        reused = 0
        for block_id in row["hash_ids"]:
            if block_id not in seen:
                break
            reused += 1
        hit += min(reused * block, row["input_length"])
        total += row["input_length"]
        seen.update(row["hash_ids"])
    return hit, total


def test_unbounded_single_replica_hit_rate_is_the_traces_prefix_reuse(rows: list[dict[str, Any]], trace: Trace) -> None:
    hit, total = prefix_reuse(rows)
    result = simulate(trace, UNBOUNDED, SimConfig())
    assert (result.tokens.hit, result.tokens.total) == (hit, total)
    assert result.tokens.l0 == hit  # an unbounded GPU cache serves it all
    assert abs(result.hit_rate() - MOONCAKE_SYNTHETIC_REUSE) < 0.02


def test_the_examples_length_cap_skips_about_forty_percent(rows: list[dict[str, Any]], trace: Trace) -> None:
    too_long = sum(1 for row in rows if row["input_length"] > 16_384)
    result = simulate(trace, dataclasses.replace(UNBOUNDED, max_model_len=16_384), SimConfig())
    assert result.skipped == too_long
    assert result.served == len(rows) - too_long
    assert 0.35 < too_long / len(rows) < 0.45


def test_same_seed_same_result_on_the_sample(sample: Trace) -> None:
    trace = sample
    units = to_units(trace, EXAMPLE.chunk_tokens)
    for routing in ("prefixaware", "kvaware"):
        config = SimConfig(routing=routing, seed=3, l2_max_age_s=3600.0, janitor_every_s=300.0)
        assert simulate(units, EXAMPLE, config) == simulate(trace, EXAMPLE, config)


def test_all_strategies_replay_the_sample_within_seconds(sample: Trace) -> None:
    trace = sample
    started = time.perf_counter()
    results = [simulate(trace, EXAMPLE, SimConfig(routing=routing, janitor_every_s=300.0)) for routing in STRATEGIES]
    elapsed = time.perf_counter() - started
    assert elapsed < 20.0, f"4 x {len(trace)} requests took {elapsed:.1f} s"
    for result in results:
        assert result.served + result.skipped == len(trace)
        assert 0.0 < result.hit_rate() < 1.0
        assert result.ttft_s["p50"] <= result.ttft_s["p90"] <= result.ttft_s["p99"]


def _sized(model: TierModel, tier: str, size: int) -> TierModel:
    if tier == "l0_tokens":
        return dataclasses.replace(model, l0_tokens=size)
    return dataclasses.replace(model, l1_tokens=size)


@pytest.mark.parametrize("routing", ["roundrobin", "session"])
def test_a_larger_lru_tier_never_lowers_the_hit_rate_on_the_sample(sample: Trace, routing: str) -> None:
    units = to_units(sample, EXAMPLE.chunk_tokens)
    model = dataclasses.replace(EXAMPLE, l2_tokens=0)
    config = SimConfig(routing=routing)
    for tier in ("l0_tokens", "l1_tokens"):
        rates = [
            simulate(units, _sized(model, tier, size), config).hit_rate()
            for size in (0, 16_384, 65_536, 262_144, 1_048_576)
        ]
        assert rates == sorted(rates), f"{tier}: {rates}"
        assert rates[-1] > rates[0]


@st.composite
def traces(draw: Callable[[st.SearchStrategy[Any]], Any]) -> Trace:
    """Requests that extend an earlier request's prefix (a conversation) or start fresh, at random times."""
    chains: list[tuple[int, ...]] = []
    requests = []
    next_id = 0
    now = 0.0
    for _ in range(draw(st.integers(1, 25))):
        prefix: tuple[int, ...] = ()
        if chains and draw(st.booleans()):
            parent = draw(st.sampled_from(chains))
            prefix = parent[: draw(st.integers(1, len(parent)))]
        fresh = draw(st.integers(0 if prefix else 1, 3))
        blocks = prefix + tuple(range(next_id, next_id + fresh))
        next_id += fresh
        chains.append(blocks)
        now += draw(st.floats(0.0, 3.0))
        tokens = len(blocks) * 512 - draw(st.integers(0, 511))
        requests.append(TraceRequest(now * 1000.0, tokens, 1, blocks))
    return Trace(tuple(requests))


@settings(max_examples=60, deadline=None)
@given(
    trace=traces(),
    routing=st.sampled_from(["roundrobin", "session"]),
    replicas=st.integers(1, 3),
    l2_units=st.integers(0, 12),
    sizes=st.lists(st.integers(0, 12), min_size=3, max_size=3),
    grow=st.integers(1, 12),
    tier=st.sampled_from(["l0_tokens", "l1_tokens"]),
)
def test_growing_an_lru_tier_never_lowers_the_hit_rate_under_load_blind_routing(
    trace: Trace, routing: str, replicas: int, l2_units: int, sizes: list[int], grow: int, tier: str
) -> None:
    # L2 stays fixed only when neither timing nor L1 shapes it: one replica (its writes keep arrival order) and a
    # growing L0 (LMCache writes to L2 what L1 and L2 lacked, so a larger L1 writes less to L2).
    l2 = l2_units * 512 if replicas == 1 and tier == "l0_tokens" else 0
    model = dataclasses.replace(
        UNBOUNDED, replicas=replicas, l0_tokens=sizes[0] * 512, l1_tokens=sizes[1] * 512, l2_tokens=l2
    )
    # The janitor runs at every write: sweeps at clock times would make L2 depend on when prefills finish.
    config = SimConfig(routing=routing, janitor_every_s=0.0)
    before = simulate(trace, model, config)
    after = simulate(trace, dataclasses.replace(model, **{tier: getattr(model, tier) + grow * 512}), config)
    assert after.tokens.hit >= before.tokens.hit
