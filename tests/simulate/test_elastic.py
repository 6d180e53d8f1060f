"""The autoscaled replay on hand-built traces: when replicas are added and removed, what a new replica holds, and
what the shared L2 gives its first requests."""

from __future__ import annotations

import dataclasses
import time

import pytest

from kvtier.errors import UsageError
from kvtier.simulate import SimConfig, Trace, TraceRequest
from kvtier.simulate.elastic import ElasticResult, ScalePolicy, simulate_elastic
from kvtier.simulate.result import TierTokens
from tests.support import ROUND_COSTS

BLOCK = 512
L2 = dataclasses.replace(ROUND_COSTS, l2_tokens=10**12)  # prefill 1 ms a token, an L2 read 0.1 ms a token
NO_L2 = ROUND_COSTS


def burst(seconds: float, every_s: float, then_quiet_s: float = 0.0) -> Trace:
    """Requests of 3 blocks every `every_s` for `seconds`, sharing the 2-block prefix (1, 2), each with its own last
    block; then one request `then_quiet_s` later (so the replay runs on while the load is gone)."""
    count = round(seconds / every_s)
    rows = [TraceRequest(i * every_s * 1000.0, 3 * BLOCK, 1, (1, 2, 1000 + i)) for i in range(count)]
    if then_quiet_s:
        rows.append(TraceRequest((seconds + then_quiet_s) * 1000.0, 3 * BLOCK, 1, (1, 2, 999)))
    return Trace(tuple(rows))


def replay(trace: Trace, policy: ScalePolicy, model: object = L2, routing: str = "roundrobin") -> ElasticResult:
    assert isinstance(model, type(L2))
    return simulate_elastic(trace, model, SimConfig(routing=routing), policy)


def ready_at(run: ElasticResult) -> list[float]:
    return [n.ready_s for n in run.new_replicas]


def test_no_load_no_scaling() -> None:
    # One request a minute (0.5 s each) never has 2 in flight: the floor holds, and the GPU-hours are its time.
    run = replay(burst(600, 60), ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20))
    assert (run.scale_ups, run.scale_downs, run.peak_replicas) == (0, 0, 1)
    assert run.gpu_hours == pytest.approx((540 + run.served[-1][1]) / 3600)  # to the last prefill


def test_scale_up_serves_only_after_the_start_up_delay() -> None:
    # 4 requests a second of ~0.5 s each on one replica: the queue grows; the decision at 10 s asks for more
    # (up to max(2 x 1, 1 + 4) = 4 at once, capped by max 4), and they serve from 10 + 20 s on.
    policy = ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20)
    run = replay(burst(100, 0.25), policy)
    assert run.scale_ups == 3
    assert ready_at(run) == [30.0, 30.0, 30.0]
    # They hold GPUs from the decision at 10 s, and nothing reached them before they were ready.
    assert run.timeline[1] == (10.0, 1, 4)
    assert all(n.first_start_s is not None and n.first_start_s >= 30.0 for n in run.new_replicas)
    assert run.peak_replicas == 4


def test_a_longer_start_up_delays_the_new_replicas_and_costs_ttft() -> None:
    quick = replay(burst(100, 0.25), ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20))
    slow = replay(burst(100, 0.25), ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=60))
    assert ready_at(slow) == [70.0, 70.0, 70.0]
    assert slow.result.ttft_s["p90"] > quick.result.ttft_s["p90"]


def test_scale_in_waits_for_the_cooldown_window() -> None:
    # The load stops at 100 s; the last request comes at 400 s. The replicas go only once every recommendation of
    # the last `cooldown_s` is lower: at the first decision at least cooldown_s after the queue emptied.
    for cooldown in (60, 150):
        policy = ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=cooldown, startup_s=20)
        run = replay(burst(100, 0.25, then_quiet_s=300), policy)
        drops = [
            t for (t, ready, _), (_, before, _) in zip(run.timeline[1:], run.timeline, strict=False) if ready < before
        ]
        assert run.scale_downs == 3
        last_busy = max(t for t, ready, _ in run.timeline if ready == 4 and t < drops[0])
        assert drops[0] - cooldown >= 100 - 10  # never before the window since the load fell
        assert drops[0] <= last_busy + cooldown + 10
        assert run.timeline[-1][1:] == (1, 1)


def test_scale_down_keeps_min_and_removes_the_newest() -> None:
    policy = ScalePolicy(2, 4, target_inflight=2, polling_s=10, cooldown_s=30, startup_s=20)
    run = replay(burst(100, 0.2, then_quiet_s=200), policy)
    assert run.scale_ups >= 1
    assert min(ready for _, ready, _ in run.timeline) == 2
    # The late request lands on an original replica (0 or 1): the added ones were removed.
    assert run.result.per_replica[0].requests + run.result.per_replica[1].requests > 0
    assert all(p.requests for p in run.result.per_replica[:2])


def test_new_replicas_start_with_empty_l0_and_l1() -> None:
    # Without L2, a new replica's first request finds nothing (its L0/L1 are new), though the old replica holds the
    # shared prefix in both.
    model = dataclasses.replace(NO_L2, l1_tokens=10**12)
    run = replay(
        burst(100, 0.25), ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20), model
    )
    firsts = [n.first for n in run.new_replicas]
    assert firsts == [TierTokens(miss=3 * BLOCK)] * 3
    # The old replica kept hitting its own L0 meanwhile.
    assert run.result.tokens.l0 > 0


def test_with_l2_the_first_request_on_a_new_replica_reads_the_shared_prefix() -> None:
    policy = ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20)
    with_l2 = replay(burst(100, 0.25), policy, L2)
    without = replay(burst(100, 0.25), policy, NO_L2)
    # The two shared blocks another replica wrote come from L2; only the request's own block is computed.
    assert [n.first for n in with_l2.new_replicas] == [TierTokens(l2_other=2 * BLOCK, miss=BLOCK)] * 3
    assert [n.first for n in without.new_replicas] == [TierTokens(miss=3 * BLOCK)] * 3
    # Each of those reads saves 1,024 tokens of prefill (1 ms each) for 0.1 ms each: the mean TTFT drops.
    assert without.result.tokens.miss - with_l2.result.tokens.miss == 3 * 2 * BLOCK
    assert with_l2.result.ttft_s["mean"] < without.result.ttft_s["mean"]


def test_an_l2_prefix_outside_the_pool_is_a_miss_on_the_new_replica() -> None:
    # L2 too small to hold a chunk: the new replicas compute everything, as without L2.
    tiny = dataclasses.replace(L2, l2_tokens=1)
    run = replay(
        burst(100, 0.25), ScalePolicy(1, 4, target_inflight=2, polling_s=10, cooldown_s=60, startup_s=20), tiny
    )
    assert [n.first for n in run.new_replicas] == [TierTokens(miss=3 * BLOCK)] * 3


@pytest.mark.parametrize("routing", ["roundrobin", "session", "prefixaware", "kvaware", "poolaware"])
def test_every_router_spreads_onto_new_replicas_and_off_removed_ones(routing: str) -> None:
    policy = ScalePolicy(1, 3, target_inflight=2, polling_s=10, cooldown_s=30, startup_s=20)
    # Prompts sharing nothing: every router may pick any replica (prefixaware and kvaware by load).
    trace = Trace(
        (
            *tuple(TraceRequest(i * 250.0, 3 * BLOCK, 1, (10000 + i, 20000 + i, 30000 + i)) for i in range(400)),
            TraceRequest(400000.0, 3 * BLOCK, 1, (1, 2, 3)),
        )
    )
    run = replay(trace, policy, routing=routing)
    assert run.result.served == 401
    assert run.scale_ups == 2
    assert all(p.requests for p in run.result.per_replica)
    assert run.timeline[-1][1] == 1


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"min_replicas": 3, "max_replicas": 2}, "--max-replicas 2 is below --min-replicas 3"),
        ({"min_replicas": 0, "max_replicas": 2}, "--min-replicas 0 is below 1"),
        ({"min_replicas": 1, "max_replicas": 2, "startup_s": -1.0}, "--startup-s -1.0 is negative"),
        ({"min_replicas": 1, "max_replicas": 2, "cooldown_s": float("nan")}, "--cooldown-s nan is negative"),
        ({"min_replicas": 1, "max_replicas": 2, "polling_s": 0.0}, "--polling-s 0.0 is not positive"),
        ({"min_replicas": 1, "max_replicas": 2, "target_inflight": 0.0}, "--target-inflight 0.0 is not positive"),
    ],
)
def test_bad_policy_is_one_line(policy: dict[str, float], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ScalePolicy(**policy)  # type: ignore[arg-type]


def test_a_trace_shorter_than_one_polling_interval_is_refused() -> None:
    with pytest.raises(UsageError, match=r"the trace spans 20 s, shorter than one polling interval \(30 s\)"):
        replay(burst(21, 1), ScalePolicy(1, 2, polling_s=30))


def test_too_many_decisions_are_refused() -> None:
    with pytest.raises(UsageError, match=r"--polling-s 0.0001 .* makes more than 1,000,000 decisions"):
        replay(burst(600, 60), ScalePolicy(1, 2, polling_s=0.0001))


def test_memory_and_time_stay_linear() -> None:
    # 20,000 requests under scaling: the replay's extra records are one pair per request and one per decision.
    trace = burst(2000, 0.1, then_quiet_s=600)
    started = time.process_time()
    run = replay(trace, ScalePolicy(1, 8, target_inflight=2, polling_s=15, cooldown_s=60, startup_s=30))
    spent = time.process_time() - started
    assert len(run.served) == run.result.served == 20_001
    assert len(run.timeline) <= (2600 / 15 + 2) + run.scale_ups
    assert spent < 10, f"{spent:.1f} s of CPU for 20,001 requests"
