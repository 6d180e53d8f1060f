"""Pool-aware routing's cache_aware knobs, derived from the tier model (kvtier/planner/pool_routing.py)."""

from __future__ import annotations

import dataclasses

import pytest

from kvtier.planner import TierModel, tier_model
from kvtier.planner.pool_routing import (
    CHARS_PER_TOKEN,
    ROUTER_MAX_TREE_SIZE,
    endpoint_knobs,
    pool_aware_knobs,
)
from kvtier.planner.ttft import stored_tokens, ttft
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

PREFIX, SUFFIX = 2048, 256  # the shipped support endpoint's bench shape (BenchConfig defaults)


@pytest.fixture(scope="module")
def support() -> TierModel:
    return tier_model(load_checked(CONFIG_DIR, "prod"), "support", "llama31-8b")


def _holder_wait_beats_l2(tiers: TierModel, extra: int) -> bool:
    """With `extra` more requests in flight on the holder, is another replica's L2 read faster (the TTFT model)?"""
    tokens = PREFIX + SUFFIX
    pooled = stored_tokens(PREFIX, tiers.chunk_tokens, tiers.save_unfull_chunk)
    service = ttft(tiers, tokens, l0=pooled).total_s  # a request ahead on the holder: a prefix hit
    holder = extra * service + service
    other = ttft(tiers, tokens, l2=pooled).total_s
    return other < holder


@pytest.mark.parametrize("fixed_s", [0.0, 0.128, 1.0, 5.0])
@pytest.mark.parametrize("l2_scale", [0.2, 1.0, 4.0])
def test_balance_threshold_is_where_the_holders_queue_costs_more_than_an_l2_read(
    support: TierModel, fixed_s: float, l2_scale: float
) -> None:
    tiers = dataclasses.replace(
        support, l2_hit_fixed_s=fixed_s, l2_load_s_per_token=support.l2_load_s_per_token * l2_scale
    )
    knobs = pool_aware_knobs(tiers, PREFIX, SUFFIX)
    # cache_aware balances once max - min > abs: at abs extra requests the holder is still worth it, at abs + 1 not.
    assert not _holder_wait_beats_l2(tiers, knobs.balance_abs_threshold)
    assert _holder_wait_beats_l2(tiers, knobs.balance_abs_threshold + 1)
    assert knobs.balance_rel_threshold == 1.0
    assert 0.0 <= knobs.cache_threshold < 1.0


def test_a_slower_l2_keeps_requests_on_the_holder_longer(support: TierModel) -> None:
    cheap = pool_aware_knobs(support, PREFIX, SUFFIX)
    slow = pool_aware_knobs(dataclasses.replace(support, l2_hit_fixed_s=3.0), PREFIX, SUFFIX)
    assert cheap.balance_abs_threshold < slow.balance_abs_threshold
    assert cheap.cache_threshold <= slow.cache_threshold
    # Below the router's defaults (64 requests, 1.5x), which ignore the pool, for the shipped endpoint.
    assert cheap.balance_abs_threshold < 64


def test_tree_budget_is_the_replicas_own_tiers_in_characters(support: TierModel) -> None:
    knobs = pool_aware_knobs(support, PREFIX, SUFFIX)
    assert knobs.max_tree_size == (support.l0_tokens + support.l1_tokens) * CHARS_PER_TOKEN
    huge = pool_aware_knobs(dataclasses.replace(support, l1_tokens=10**9), PREFIX, SUFFIX)
    assert huge.max_tree_size == ROUTER_MAX_TREE_SIZE


def test_every_knob_is_rendered_and_explained(support: TierModel) -> None:
    knobs = pool_aware_knobs(support, PREFIX, SUFFIX)
    args = knobs.args()
    flags = args[0::2]
    assert flags == list(knobs.why)
    for flag, value in zip(flags, args[1::2], strict=True):
        assert knobs.why[flag].startswith(f"{value}:") or knobs.why[flag].startswith(f"{int(value):,}:")


def test_without_a_shared_l2_there_is_nothing_to_derive(support: TierModel) -> None:
    with pytest.raises(ValueError, match="shared L2"):
        pool_aware_knobs(dataclasses.replace(support, l2_tokens=0), PREFIX, SUFFIX)


def test_only_poolaware_endpoints_get_knobs() -> None:
    config = load_checked(CONFIG_DIR, "prod")
    endpoint = config.lob("support").endpoints[0]
    assert endpoint_knobs(config, "support", endpoint) is None
    pool = endpoint.model_copy(update={"routing": "poolaware"})
    knobs = endpoint_knobs(config, "support", pool)
    assert (endpoint.bench.prefix_len, endpoint.bench.suffix_len) == (PREFIX, SUFFIX)
    assert knobs == pool_aware_knobs(tier_model(config, "support", endpoint.name), PREFIX, SUFFIX)
