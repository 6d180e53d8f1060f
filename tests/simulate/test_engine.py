"""The simulator on small hand-built traces: exact hit tokens per tier, LRU order, L2 janitor, TTFT, routers."""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.errors import UsageError
from kvtier.simulate import SimConfig, Trace, TraceRequest, parse_trace, simulate
from kvtier.simulate.cache import LRU, SharedPool
from kvtier.simulate.result import TierTokens, summarize_ttft
from kvtier.simulate.routers import Ask, ClusterView, Session
from kvtier.simulate.trace import to_units
from tests.support import ROUND_COSTS

BIG = 10**12
BLOCK = 512
BASE = ROUND_COSTS


def trace(*rows: tuple[float, Sequence[int]] | tuple[float, Sequence[int], int]) -> Trace:
    """Rows of (arrival in seconds, block ids[, tokens]); tokens default to whole blocks."""
    requests = []
    for row in rows:
        tokens = row[2] if len(row) == 3 else len(row[1]) * BLOCK
        requests.append(TraceRequest(row[0] * 1000.0, tokens, 1, tuple(row[1])))
    return Trace(tuple(requests))


def test_one_replica_unbounded_hits_equal_the_reuse() -> None:
    # Reuse by hand: r1 reuses blocks 1,2; r2 block 1; r3 repeats r0 whole.
    result = simulate(trace((0, [1, 2, 3]), (10, [1, 2, 4]), (20, [1, 5], 1000), (30, [1, 2, 3])), BASE, SimConfig())
    assert result.tokens == TierTokens(l0=1024 + 512 + 1536, miss=1536 + 512 + 488)
    assert result.hit_rate() == pytest.approx(3072 / 5608)
    assert (result.served, result.skipped) == (4, 0)


def test_two_replicas_round_robin_without_l2() -> None:
    model = dataclasses.replace(BASE, replicas=2)
    rows = trace((0, [1, 2]), (10, [1, 2, 3]), (20, [1, 2, 3]), (30, [1, 2]))
    result = simulate(rows, model, SimConfig(routing="roundrobin"))
    # replica 0: r0 cold, r2 reuses 1,2 and computes 3; replica 1: r1 cold, r3 reuses 1,2.
    assert result.tokens == TierTokens(l0=2048, miss=1024 + 1536 + 512)
    assert [p.requests for p in result.per_replica] == [2, 2]


def test_two_replicas_round_robin_with_l2() -> None:
    model = dataclasses.replace(BASE, replicas=2, l2_tokens=BIG)
    rows = trace((0, [1, 2]), (10, [1, 2, 3]), (20, [1, 2, 3]), (30, [1, 2]))
    result = simulate(rows, model, SimConfig(routing="roundrobin"))
    # r1 on replica 1 loads 1,2 from L2 (written by replica 0); r2 on replica 0 loads 3 (written by replica 1).
    assert result.tokens == TierTokens(l0=1024 + 1024, l2_other=1024 + 512, miss=1024 + 512)
    assert (result.l2_written_units, result.l2_peak_units, result.l2_deleted_units) == (3, 3, 0)
    # TTFTs: r0 1.024 s cold; r1 loads 1024 tokens from L2 and computes 512; r2 loads 511 from L2 and computes
    # the last token (LMCache loads N - 1: "need to load: 1924" of 1,925); r3 computes the last token.
    ttfts = sorted([1.024, 1024 * 1e-4 + 512 * 1e-3, 511 * 1e-4 + 1e-3, 1e-3])
    assert result.ttft_s["p50"] == pytest.approx((ttfts[1] + ttfts[2]) / 2)


def test_l2_own_and_peer_writes_are_told_apart() -> None:
    model = dataclasses.replace(BASE, replicas=2, l0_tokens=0, l2_tokens=BIG)
    rows = trace((0, [1, 2]), (10, [1, 2, 3]), (20, [1, 2, 3]), (30, [1, 2]))
    result = simulate(rows, model, SimConfig(routing="roundrobin"))
    # r2 (replica 0) finds 1,2 it wrote and 3 replica 1 wrote; r3 (replica 1) finds 1,2 replica 0 wrote.
    assert result.tokens == TierTokens(l2_same=1024, l2_other=1024 + 512 + 1024, miss=1024 + 512)


def test_l1_serves_what_l0_evicted_and_costs_its_load_time() -> None:
    model = dataclasses.replace(BASE, l0_tokens=BLOCK, l1_tokens=BIG)
    result = simulate(trace((0, [1, 2]), (10, [1, 2])), model, SimConfig())
    # L0 holds one block (the head, kept last), L1 holds both.
    assert result.tokens == TierTokens(l0=512, l1=512, miss=1024)
    second = 511 * 1e-5 + 1e-3  # load one block from L1 but its last token, compute that token
    assert result.ttft_s["p50"] == pytest.approx((1.024 + second) / 2)


def test_lru_evicts_the_least_recently_used_and_the_tail_of_a_prefix_first() -> None:
    cache = LRU(3)
    cache.store([1, 2, 3])
    assert cache.order() == [3, 2, 1]  # tail first out
    cache.store([4])
    assert cache.order() == [2, 1, 4]
    cache.store([1, 5])
    assert cache.order() == [4, 5, 1]
    assert cache.evictions == 2
    assert 2 not in cache
    off = LRU(0)
    off.store([1])
    assert 1 not in off


def test_lru_eviction_order_decides_hits() -> None:
    model = dataclasses.replace(BASE, l0_tokens=2 * BLOCK)
    rows = trace((0, [1, 2]), (10, [3]), (20, [1, 2]), (30, [3]), (40, [1, 2]))
    result = simulate(rows, model, SimConfig())
    # After r1 the cache is {1, 3} (2, the tail of [1, 2], went first): r2 hits 1 only and leaves {2, 1};
    # r3 misses 3 and evicts 2 again, so r4 hits 1 only.
    assert result.tokens == TierTokens(l0=512 + 512, miss=1024 + 512 + 512 + 512 + 512)


def test_janitor_deletes_by_age_then_oldest_until_under_budget() -> None:
    pool = SharedPool(capacity=10, max_age_s=100.0, sweep_every_s=50.0)
    pool.store([1], replica=0, now=10.0)
    pool.store([2], replica=1, now=60.0)
    pool.advance(120.0)  # sweeps at 50 and 100: block 1 is 90 s old
    assert pool.get(1) == (10.0, 0)
    pool.advance(150.0)  # sweep at 150: block 1 is 140 s old, block 2 90 s
    assert pool.get(1) is None
    assert pool.get(2) == (60.0, 1)

    budget = SharedPool(capacity=2, sweep_every_s=50.0)
    budget.store([1, 2, 3], replica=0, now=0.0)
    budget.store([2, 4], replica=1, now=10.0)  # 2 is rewritten (LMCache replaces the file): youngest again
    assert len(budget) == 4  # over budget until the next sweep
    budget.advance(49.0)
    assert len(budget) == 4
    budget.advance(50.0)
    assert list(budget.files) == [2, 4]
    assert budget.get(2) == (10.0, 1)
    assert (budget.written, budget.deleted, budget.peak) == (5, 2, 4)


def test_janitor_over_budget_deletes_down_to_its_target_fraction() -> None:
    pool = SharedPool(capacity=10, sweep_every_s=60.0, target_fraction=0.9)
    pool.store(range(10), replica=0, now=0.0)
    pool.advance(60.0)
    assert len(pool) == 10  # at the budget, not over it: nothing to do
    pool.store([10], replica=0, now=61.0)
    pool.advance(120.0)
    assert list(pool.files) == [2, 3, 4, 5, 6, 7, 8, 9, 10]  # 9 = 90% of 10, oldest gone first


class SweepEachPeriod(SharedPool):
    """The janitor as deployed, one sweep per period even across a long quiet gap (the reference for the jump)."""

    def advance(self, now: float) -> None:
        if self.capacity <= 0:
            return
        while self.next_sweep <= now:
            self.sweep(self.next_sweep)
            self.next_sweep += self.sweep_every_s


@settings(max_examples=80, deadline=None)
@given(
    capacity=st.integers(1, 6),
    max_age=st.sampled_from([None, 7.0, 30.0]),
    period=st.sampled_from([1.0, 2.5, 10.0]),
    target=st.sampled_from([0.5, 0.9, 1.0]),
    steps=st.lists(st.tuples(st.floats(0.0, 60.0), st.lists(st.integers(0, 9), max_size=4)), max_size=12),
)
def test_a_quiet_gap_of_many_sweeps_ends_as_if_each_had_run(
    capacity: int, max_age: float | None, period: float, target: float, steps: list[tuple[float, list[int]]]
) -> None:
    fast = SharedPool(capacity, max_age, period, target)
    slow = SweepEachPeriod(capacity, max_age, period, target)
    now = 0.0
    for gap, units in steps:
        now += gap
        for pool in (fast, slow):
            pool.advance(now)
            pool.store(units, replica=0, now=now)
    for pool in (fast, slow):
        pool.advance(now + 100.0)
    assert (fast.files, fast.deleted) == (slow.files, slow.deleted)
    assert fast.next_sweep == pytest.approx(slow.next_sweep)


def test_a_far_timestamp_costs_no_sweep_per_period() -> None:
    """A trace's last request a century later (or a janitor period of a microsecond) replays at once."""
    pool = SharedPool(capacity=2, max_age_s=5.0, sweep_every_s=1e-6)
    pool.store([1, 2, 3], replica=0, now=0.0)
    started = time.perf_counter()
    pool.advance(3.2e9)
    assert time.perf_counter() - started < 1.0
    assert len(pool) == 0 and pool.deleted == 3 and pool.next_sweep > 3.2e9
    far = trace((0, [1, 2]), (3.2e9, [1, 2]))
    result = simulate(far, dataclasses.replace(BASE, l2_tokens=10 * BLOCK), SimConfig(janitor_every_s=1e-6))
    assert result.served == 2


def test_janitor_running_continuously_enforces_limits_at_once() -> None:
    pool = SharedPool(capacity=2, max_age_s=5.0)
    pool.store([1, 2, 3], replica=0, now=0.0)
    assert list(pool.files) == [2, 3]
    pool.advance(5.0)
    assert len(pool) == 2  # exactly the max age is not older than it
    pool.advance(5.001)
    assert len(pool) == 0


def test_an_l2_without_a_load_speed_holds_nothing() -> None:
    model = dataclasses.replace(BASE, replicas=2, l2_tokens=BIG, l2_load_s_per_token=float("inf"))
    result = simulate(trace((0, [1, 2]), (10, [1, 2])), model, SimConfig(routing="roundrobin"))
    assert result.tokens == TierTokens(miss=2048)
    assert result.ttft_s["max"] == pytest.approx(1.024)


def test_a_tier_model_without_prefill_speed_is_refused() -> None:
    model = dataclasses.replace(BASE, prefill_s_per_token=float("inf"))
    with pytest.raises(UsageError, match="prefill_s_per_token is inf; the catalog lacks"):
        simulate(trace((0, [1])), model, SimConfig())


def test_l2_ttl_in_a_run() -> None:
    model = dataclasses.replace(BASE, replicas=2, l2_tokens=BIG)
    rows = trace((0, [1, 2]), (100, [1, 2, 3]))
    kept = simulate(rows, model, SimConfig(routing="roundrobin", l2_max_age_s=1000.0, janitor_every_s=60.0))
    gone = simulate(rows, model, SimConfig(routing="roundrobin", l2_max_age_s=50.0, janitor_every_s=60.0))
    assert kept.tokens.l2_other == 1024
    assert gone.tokens.l2_other == 0
    assert gone.l2_deleted_units == 2


def test_requests_longer_than_max_model_len_are_skipped_and_leave_no_trace() -> None:
    model = dataclasses.replace(BASE, max_model_len=1024)
    result = simulate(trace((0, [1, 2, 3]), (10, [1, 2]), (20, [1, 2])), model, SimConfig())
    assert (result.requests, result.served, result.skipped) == (3, 2, 1)
    assert result.tokens == TierTokens(l0=1024, miss=1024)


def test_ttft_is_queueing_plus_service_with_slots() -> None:
    rows = trace((0, [1, 2], 1000), (0, [3, 4], 1000))
    one = simulate(rows, BASE, SimConfig(slots=1))
    assert one.ttft_s["p50"] == pytest.approx(1.5)
    assert one.ttft_s["max"] == pytest.approx(2.0)
    assert one.per_replica[0].busy_s == pytest.approx(2.0)
    assert one.makespan_s == pytest.approx(2.0)
    two = simulate(rows, BASE, SimConfig(slots=2))
    assert two.ttft_s["max"] == pytest.approx(1.0)


def test_a_cached_prefix_still_costs_attention_and_the_last_token_is_computed() -> None:
    model = dataclasses.replace(BASE, prefill_s_per_token=0.0, prefill_s_per_token_squared=1e-6)
    result = simulate(trace((0, [1, 2]), (10, [1, 2, 3]), (20, [1, 2, 3])), model, SimConfig())
    first = 1e-6 * 1024**2
    second = 1e-6 * (1536**2 - 1024**2)
    third = 1e-6 * (1536**2 - 1535**2)
    assert sorted([first, second, third])[1] == pytest.approx(result.ttft_s["p50"])
    assert result.ttft_s["max"] == pytest.approx(max(first, second))


def test_chunks_larger_than_a_trace_block_hit_whole_chunks_only() -> None:
    model = dataclasses.replace(BASE, chunk_tokens=1024)
    result = simulate(trace((0, [1, 2, 3, 4]), (10, [1, 2, 3, 9])), model, SimConfig())
    # Units are [1,2] and [3,4] / [3,9]: the second request reuses one 1024-token chunk, not three blocks.
    assert result.tokens.hit == 1024
    assert result.unit_tokens == 1024
    units = to_units(trace((0, [1, 2, 3], 1200)), 1024)
    assert units.units == ((2, 3),)


def test_session_routing_is_sticky_per_first_block() -> None:
    model = dataclasses.replace(BASE, replicas=3)
    rows = trace(*((float(i), [i % 7, 1000 + i]) for i in range(60)))
    router = Session(ClusterView([0, 0, 0], [], [], random.Random(0)))
    owners = {s: router.choose(Ask((s,), BLOCK, s)) for s in range(7)}
    assert len(set(owners.values())) > 1
    result = simulate(rows, model, SimConfig(routing="session"))
    expected = [sum(1 for i in range(60) if owners[i % 7] == r) for r in range(3)]
    assert [p.requests for p in result.per_replica] == expected


def test_prefixaware_follows_its_history_even_to_a_busier_replica() -> None:
    model = dataclasses.replace(BASE, replicas=2)
    # r1 arrives while r0 still runs: the trie sends it after r0 anyway.
    rows = trace((0, [1, 2]), (0.5, [1, 3]))
    result = simulate(rows, model, SimConfig(routing="prefixaware"))
    assert sorted(p.requests for p in result.per_replica) == [0, 2]
    assert result.tokens.l0 == 512
    # Below the minimum match length it goes to the least-loaded replica instead.
    fallback = simulate(rows, model, SimConfig(routing="prefixaware", prefix_min_match_tokens=2048))
    assert [p.requests for p in fallback.per_replica] == [1, 1]
    assert fallback.tokens.hit == 0


def test_kvaware_routes_to_the_holder_unless_the_match_is_short() -> None:
    model = dataclasses.replace(BASE, replicas=2)
    rows = trace((0, [1, 2, 3, 4]), *((10.0 * i, [1, 2, 3, 4, 100 + i]) for i in range(1, 20)))
    holder = simulate(rows, model, SimConfig(routing="kvaware", kv_aware_threshold=2000))
    assert sorted(p.requests for p in holder.per_replica) == [0, 20]
    assert holder.tokens.l0 == 19 * 2048
    # Threshold 0: a match short of the whole prompt falls back to the least-loaded (here random) replica.
    strict = simulate(rows, model, SimConfig(routing="kvaware", kv_aware_threshold=0, seed=1))
    assert min(p.requests for p in strict.per_replica) > 0
    assert strict.tokens.l0 < holder.tokens.l0


def test_same_seed_same_result() -> None:
    model = dataclasses.replace(BASE, replicas=3, l0_tokens=4 * BLOCK, l2_tokens=20 * BLOCK)
    rows = trace(*((i * 0.3, [i % 5, 50 + i % 11, 500 + i]) for i in range(300)))
    for routing in ("prefixaware", "kvaware"):
        config = SimConfig(routing=routing, seed=7, janitor_every_s=5.0, l2_max_age_s=30.0)
        assert simulate(rows, model, config) == simulate(rows, model, config)


def test_qps_scale_compresses_arrivals() -> None:
    rows = trace((0, [1], 500), (1, [2], 500))
    slow = simulate(rows, BASE, SimConfig())
    fast = simulate(rows, BASE, SimConfig(qps_scale=4.0))
    assert slow.ttft_s["max"] == pytest.approx(0.5)
    assert fast.ttft_s["max"] == pytest.approx(0.75)  # arrives at 0.25 s, waits 0.25 s


def test_bad_settings_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="routing"):
        SimConfig(routing="random")
    with pytest.raises(UsageError, match="slots"):
        SimConfig(slots=0)
    with pytest.raises(UsageError, match="replicas"):
        simulate(trace((0, [1])), dataclasses.replace(BASE, replicas=0), SimConfig())


def test_trace_lines_are_parsed_with_their_line_number() -> None:
    good = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}'
    parsed = parse_trace([good, "", good], "t.jsonl")
    assert len(parsed) == 2
    assert parsed.requests[1] == TraceRequest(0.0, 600, 3, (1, 2), line=3)


def test_ttft_summary_interpolates_like_numpy_and_is_nan_when_empty() -> None:
    summary = summarize_ttft([4.0, 1.0, 3.0, 2.0])
    assert (summary["p50"], summary["max"], summary["mean"]) == (2.5, 4.0, 2.5)
    assert summary["p90"] == pytest.approx(3.7)
    assert all(math.isnan(v) for v in summarize_ttft([]).values())
