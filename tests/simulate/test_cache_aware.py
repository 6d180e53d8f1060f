"""vllm-router's cache_aware in the simulator: what `prefixaware` and `poolaware` run on in standalone mode."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kvtier.cli.simulate import _cache_aware
from kvtier.planner import tier_model
from kvtier.planner.pool_routing import CHARS_PER_TOKEN, ROUTER_DEFAULT_KNOBS, CacheAwareKnobs, pool_aware_knobs
from kvtier.rules import load_checked
from kvtier.simulate import SimConfig, simulate
from kvtier.simulate.routers import Ask, CacheAware, ClusterView, make_router
from tests.simulate.test_engine import BASE, BLOCK, trace
from tests.support import CONFIG_DIR

POOLED = dataclasses.replace(BASE, replicas=2, l2_tokens=10**9)


def _knobs(threshold: float = 0.3, abs_: int = 64, rel: float = 1.5, tree: int = 2**25) -> CacheAwareKnobs:
    return CacheAwareKnobs(threshold, abs_, rel, tree, {})


def _router(load: list[int], knobs: CacheAwareKnobs) -> CacheAware:
    view = ClusterView(load, [], [], random.Random(0))
    router = make_router("prefixaware", view, BLOCK, cache_aware=knobs)
    assert isinstance(router, CacheAware)
    return router


def test_a_match_above_the_threshold_goes_to_its_holder_below_it_to_the_least_loaded() -> None:
    load = [0, 0]
    router = _router(load, _knobs(threshold=0.5))
    assert router.choose(Ask((1, 2, 3, 4), 4 * BLOCK, 0)) == 0  # nothing known: least loaded, the first of equals
    load[0] = 1
    assert router.choose(Ask((1, 2, 3, 9), 4 * BLOCK, 1)) == 0  # 3 of 4 matched (> 0.5): the holder, though busier
    assert router.choose(Ask((1, 7, 8, 9), 4 * BLOCK, 2)) == 1  # 1 of 4 (<= 0.5): the least loaded
    assert router.choose(Ask((1, 7, 8, 9, 10), 5 * BLOCK, 3)) == 1  # now B holds 1,7,8,9: 4 of 5


def test_imbalance_needs_both_the_absolute_and_the_relative_threshold() -> None:
    load = [0, 0]
    router = _router(load, _knobs(threshold=0.0, abs_=2, rel=1.5))
    router.choose(Ask((1, 2), 2 * BLOCK, 0))  # A learns 1,2
    load[:] = [3, 1]  # 3 - 1 > 2? no: balanced, the holder
    assert router.choose(Ask((1, 2, 3), 3 * BLOCK, 1)) == 0
    load[:] = [4, 1]  # 4 - 1 > 2 and 4 > 1.5: imbalanced, the least loaded
    assert router.choose(Ask((1, 2, 3), 3 * BLOCK, 2)) == 1
    load[:] = [10, 7]  # 3 > 2 but 10 <= 1.5 x 7: balanced, the longest match (A and B both hold 1,2,3 now)
    assert router.choose(Ask((1, 2, 3), 3 * BLOCK, 3)) == 1  # ties among holders: the less loaded


def test_the_tree_forgets_least_recently_used_prefixes_beyond_its_budget() -> None:
    load = [0, 0]
    router = _router(load, _knobs(threshold=0.5, tree=2 * BLOCK * CHARS_PER_TOKEN))  # two units per replica
    router.choose(Ask((1, 2), 2 * BLOCK, 0))
    load[0] = 1
    router.choose(Ask((1, 2), 2 * BLOCK, 1))  # still A: full match
    router.choose(Ask((5, 6), 2 * BLOCK, 2))  # no match: B (least loaded)
    load[1] = 2
    router.choose(Ask((3, 4), 2 * BLOCK, 3))  # no match: A, which now forgets 1,2
    load[:] = [1, 0]
    assert router.choose(Ask((1, 2), 2 * BLOCK, 4)) == 1  # forgotten: least loaded


def test_derived_knobs_leave_a_busy_holder_that_the_routers_defaults_wait_for() -> None:
    """Three requests on one prefix while the first is still prefilling: the defaults (64 requests) keep all three on
    the holder; knobs that balance at once send the third to the idle peer, which reads the prefix from L2."""
    prefix = list(range(1, 9))
    rows = trace((0, prefix), (5, [*prefix, *range(100, 120)]), (6, [*prefix, 200]))
    defaults = simulate(rows, POOLED, SimConfig(routing="prefixaware", cache_aware=ROUTER_DEFAULT_KNOBS))
    assert sorted(p.requests for p in defaults.per_replica) == [0, 3]
    eager = simulate(rows, POOLED, SimConfig(routing="poolaware", cache_aware=_knobs(threshold=0.3, abs_=0, rel=1.0)))
    assert sorted(p.requests for p in eager.per_replica) == [1, 2]
    assert eager.tokens.l2_other == len(prefix) * BLOCK
    assert eager.ttft_s["mean"] < defaults.ttft_s["mean"]
    # The replay runs cache_aware, not the production-stack trie (which follows the holder): a match rate at or
    # below the threshold (8 of 28 and 8 of 9 units, under 0.99) goes to the least-loaded replica.
    strict = simulate(rows, POOLED, SimConfig(routing="prefixaware", cache_aware=_knobs(threshold=0.99)))
    assert sorted(p.requests for p in strict.per_replica) == [1, 2]
    trie = simulate(rows, POOLED, SimConfig(routing="prefixaware"))
    assert sorted(p.requests for p in trie.per_replica) == [0, 3]


def test_standalone_endpoints_simulate_the_knobs_their_router_is_rendered_with() -> None:
    prod = load_checked(CONFIG_DIR, "prod")
    support = prod.lob("support").endpoints[0]
    model = tier_model(prod, "support", support.name)
    assert support.mode == "standalone"
    assert _cache_aware(support, model, "prefixaware") == ROUTER_DEFAULT_KNOBS
    expected = pool_aware_knobs(model, support.bench.prefix_len, support.bench.suffix_len)
    assert _cache_aware(support, model, "poolaware") == expected
    assert _cache_aware(support, model, "roundrobin") is None
    dev = load_checked(CONFIG_DIR, "dev")
    retail = dev.lob("retail").endpoints[0]
    assert retail.mode == "operator"  # the operator's router: production-stack's trie stays the model
    assert _cache_aware(retail, tier_model(dev, "retail", retail.name), "prefixaware") is None


@pytest.mark.parametrize("routing", ["roundrobin", "session", "kvaware"])
def test_cache_aware_knobs_do_not_change_other_strategies(routing: str) -> None:
    view = ClusterView([0, 0], [], [], random.Random(0))
    assert not isinstance(make_router(routing, view, BLOCK, cache_aware=ROUTER_DEFAULT_KNOBS), CacheAware)
