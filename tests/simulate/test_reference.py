"""The replay's fast paths (issue 40 item 2) against plain reference versions of the same rules: production-stack's
prefix history as a dict of replica sets, the pool-aware router's expected TTFT summed per replica as its docstring
says, and the janitor asked at every event. For every routing, bounded and unbounded tiers, with up to 8 replicas
(PrefixAware's byte array) and more (its dict), through the autoscaler (replicas added past 8 while it runs) and
the streamed replay, every number of the result must be exactly the reference's."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

import kvtier.simulate.engine as engine_module
from kvtier.planner.model import TierModel
from kvtier.planner.pool_routing import CacheAwareKnobs
from kvtier.simulate import SimConfig
from kvtier.simulate.elastic import ScalePolicy, simulate_elastic
from kvtier.simulate.engine import Replay
from kvtier.simulate.result import TtftSample
from kvtier.simulate.routers import STRATEGIES, Ask, ClusterView, Router, make_router
from kvtier.simulate.stream import replay_stream, units_bound
from kvtier.simulate.trace import Request
from kvtier.trace import Row, Trace, TraceRequest
from tests.support import ROUND_COSTS

BLOCK = 512
BOUNDED = dataclasses.replace(ROUND_COSTS, l0_tokens=6 * BLOCK, l1_tokens=10 * BLOCK, l2_tokens=40 * BLOCK)
UNBOUNDED = dataclasses.replace(ROUND_COSTS, l0_tokens=6 * BLOCK, l1_tokens=10**6 * BLOCK, l2_tokens=10**6 * BLOCK)


def _rows(count: int, seed: int) -> list[Row]:
    """Conversations growing turn by turn over a few shared system prompts; some prompts end inside a block, some
    name a LoRA adapter; some come at the same instant, in bursts, after pauses longer than the L2 max ages, or just
    at a janitor sweep."""
    rng = random.Random(seed)
    rows: list[Row] = []
    sessions: list[list[int]] = []
    fresh = 100
    now = 0.0
    for line in range(1, count + 1):
        if not sessions or rng.random() < 0.25:
            sessions.append([rng.randrange(4)])
        history = rng.choice(sessions)
        history.extend(range(fresh, fresh + rng.randint(1, 4)))
        fresh += 4
        ids = tuple(history[-14:])
        tokens = len(ids) * BLOCK - (rng.randrange(1, BLOCK) if rng.random() < 0.2 else 0)
        adapter = "faq" if rng.random() < 0.1 else None
        now += rng.choice([0.0, rng.expovariate(2.0), rng.expovariate(1 / 300)]) * 1000.0  # ms: bursts, pauses
        if rng.random() < 0.1:
            now = math.ceil(now / 30_000) * 30_000.0  # at a janitor sweep (every 30 s)
        rows.append((now, tokens, 1, ids, line, adapter))
    return rows


def _least_loaded(view: ClusterView, candidates: Sequence[int]) -> int:
    if len(candidates) == 1:
        return candidates[0]
    lowest = min(view.outstanding[r] for r in candidates)
    best = [r for r in candidates if view.outstanding[r] == lowest]
    return best[0] if len(best) == 1 else view.rng.choice(best)


class PlainPrefixAware:
    """production-stack's history: each unit with the set of replicas it was sent to; the longest match among the
    active replicas wins, shorter than `min_match_tokens` goes to the least loaded; the whole prompt is recorded."""

    def __init__(self, view: ClusterView, unit_tokens: int, min_match_tokens: int) -> None:
        self.view, self.unit_tokens, self.min_match_tokens = view, unit_tokens, min_match_tokens
        self.sent: dict[int, set[int]] = {}

    def choose(self, ask: Ask) -> int:
        view = self.view
        candidates = set(view.active)
        matched = 0
        for unit in ask.units:
            narrowed = candidates & self.sent.get(unit, set())
            if not narrowed:
                break
            candidates, matched = narrowed, matched + 1
        if min(matched * self.unit_tokens, ask.tokens) < self.min_match_tokens:
            replica = _least_loaded(view, view.active)
        else:
            replica = _least_loaded(view, [r for r in view.active if r in candidates])
        for unit in ask.units:
            self.sent.setdefault(unit, set()).add(replica)
        return replica


class PlainPoolAware:
    """Expected TTFT per active replica = its queue wait by the router's ledger + its service: the prefix it finds
    in its L0 (free), its L1 (loaded) or the pool (one L2 load), and the prefill of the rest (at least one token)."""

    def __init__(self, view: ClusterView, unit_tokens: int, model: TierModel, slots: int) -> None:
        self.view, self.unit_tokens, self.model, self.slots = view, unit_tokens, model, slots
        self.free_at: dict[int, float] = {}

    def service(self, replica: int, ask: Ask) -> float:
        view, model, size = self.view, self.model, self.unit_tokens
        assert view.l2 is not None
        found = [0, 0, 0]  # units in L0, L1, L2
        for unit in ask.units:
            if unit in view.l0[replica]:
                found[0] += 1
            elif unit in view.l1[replica]:
                found[1] += 1
            elif view.l2.get(unit) is not None:
                found[2] += 1
            else:
                break
        cached = min(sum(found) * size, ask.tokens - 1)
        seconds = model.compute_seconds(ask.tokens, cached)
        if found[1]:
            seconds += model.l1_load_seconds(found[1] * size)
        if found[2] and model.has_l2:
            seconds += model.l2_load_seconds(found[2] * size)
        return seconds

    def choose(self, ask: Ask) -> int:
        view = self.view
        expected: dict[int, tuple[float, float]] = {}  # replica -> (TTFT, service)
        for replica in view.active:
            if not view.outstanding[replica]:
                self.free_at[replica] = ask.now
            service = self.service(replica, ask)
            expected[replica] = (max(self.free_at.get(replica, 0.0) - ask.now, 0.0) + service, service)
        best: list[int] = []
        best_ttft = math.inf
        for replica, (ttft, _) in expected.items():
            if ttft < best_ttft - 1e-12:
                best, best_ttft = [replica], ttft
            elif abs(ttft - best_ttft) <= 1e-12:
                best.append(replica)
        replica = _least_loaded(view, best)
        start = max(self.free_at.get(replica, 0.0), ask.now)
        self.free_at[replica] = start + expected[replica][1] / self.slots
        return replica


def _plain_router(
    strategy: str,
    view: ClusterView,
    unit_tokens: int,
    *,
    min_match_tokens: int = 0,
    kv_aware_threshold: int,
    model: TierModel | None = None,
    slots: int = 1,
    cache_aware: CacheAwareKnobs | None = None,
    max_units: float = math.inf,
) -> Router:
    """`make_router` with the plain versions of prefixaware and poolaware (production-stack mode)."""
    if cache_aware is None and strategy == "prefixaware":
        return PlainPrefixAware(view, unit_tokens, min_match_tokens)
    if cache_aware is None and strategy == "poolaware" and model is not None:
        return PlainPoolAware(view, unit_tokens, model, slots)
    return make_router(
        strategy,
        view,
        unit_tokens,
        min_match_tokens=min_match_tokens,
        kv_aware_threshold=kv_aware_threshold,
        model=model,
        slots=slots,
        cache_aware=cache_aware,
        max_units=max_units,
    )


@contextmanager
def plain_rules() -> Iterator[None]:
    """Replays started inside run on the plain versions."""
    start, finish = Replay.start, Replay.finish

    def swept_start(replay: Replay, replica: int, request: Request, now: float) -> None:
        replay.l2.advance(now)  # the janitor asked at every lookup, due or not
        start(replay, replica, request, now)

    def swept_finish(replay: Replay, done: float, sequence: int, replica: int, request: Request, known: int) -> None:
        replay.l2.advance(done)  # and at every write (the L0 and L1 stores before it leave L2 alone)
        finish(replay, done, sequence, replica, request, known)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "make_router", _plain_router)
        patch.setattr(Replay, "start", swept_start)
        patch.setattr(Replay, "finish", swept_finish)
        yield


def _configs() -> list[SimConfig]:
    settings = (
        SimConfig(l2_max_age_s=600.0, janitor_every_s=30.0),
        SimConfig(slots=2, seed=7, janitor_every_s=0.0, l2_max_age_s=900.0, prefix_min_match_tokens=1024),
        SimConfig(qps_scale=3.0, kv_aware_threshold=300),
    )
    return [dataclasses.replace(setting, routing=routing) for routing in STRATEGIES for setting in settings]


@pytest.mark.parametrize("replicas", [1, 3, 8, 11])
@pytest.mark.parametrize("tiers", [BOUNDED, UNBOUNDED], ids=["bounded", "unbounded"])
def test_every_routing_equals_the_plain_rules(tiers: TierModel, replicas: int) -> None:
    rows = _rows(700, seed=replicas)
    model = dataclasses.replace(tiers, replicas=replicas)
    runs = [(model, config) for config in _configs()]
    # The streamed replay with and without a bound on the units (PrefixAware's byte array sized by it, or not).
    fast = replay_stream(rows, runs, max_units=units_bound(10**6))
    unsized = replay_stream(rows, runs)
    with plain_rules():
        plain = replay_stream(rows, runs)
    assert [r.tokens.hit for r in fast].count(0) < len(fast) // 2  # the trace has hits to tell apart
    for config, got, other, expected in zip(_configs(), fast, unsized, plain, strict=True):
        assert got == expected, config
        assert other == expected, config


@pytest.mark.parametrize("routing", ["prefixaware", "poolaware", "kvaware"])
def test_the_autoscaler_adding_replicas_past_a_byte_equals_the_plain_rules(routing: str) -> None:
    rows = _rows(900, seed=3)
    trace = Trace(tuple(TraceRequest(r[0] * 0.02, r[1], r[2], r[3], r[4], r[5]) for r in rows))  # a busy burst
    policy = ScalePolicy(min_replicas=2, max_replicas=14, target_inflight=1, polling_s=1.0, cooldown_s=5.0, startup_s=2)
    config = SimConfig(routing=routing, l2_max_age_s=60.0, janitor_every_s=5.0)
    fast = simulate_elastic(trace, BOUNDED, config, policy)
    with plain_rules():
        plain = simulate_elastic(trace, BOUNDED, config, policy)
    assert fast.peak_replicas > 8  # PrefixAware moved its history from bytes to the dict on the way
    assert fast == plain


@pytest.mark.parametrize("count", [0, 1, 63, 64, 65, 200])
def test_the_ttft_sample_counts_and_knows_its_last_value(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(TtftSample, "BLOCK", 64)  # values cross block boundaries
    sample = TtftSample()
    assert math.isnan(sample.last) and len(sample) == 0
    rng = random.Random(count)
    values = []
    for _ in range(count):
        values.append(rng.uniform(0, 10))
        sample.add(values[-1])
        assert sample.last == values[-1] and len(sample) == len(values)
    summary = sample.summary()
    assert len(sample) == count and (not values or (summary["max"] == max(values) and sample.last == values[-1]))
