"""Pool-aware routing for the standalone router: vllm-router's `cache_aware` knobs derived from the endpoint's plan.

vllm-router 0.1.17 has no pool-aware policy; its `cache_aware` (docs/references.md "Issue 25, part 2") routes to the
worker whose approximate tree matches more than `cache_threshold` of the request, else to the least loaded, unless
the loads (requests in flight per worker) are imbalanced: `max - min > balance_abs_threshold` and
`max > balance_rel_threshold x min`, then always to the least loaded. Its defaults (0.3, 64, 1.5) treat the holder
of a prefix as the only replica that can skip its prefill. With a shared L2 every replica can: the holder saves only
an L2 read (fixed cost + bytes at the L2 read rate) over any other replica, so a few requests queued on the holder
cost more than its cache is worth. The knobs below say how many, from kvtier/planner/ttft.py's numbers for the
endpoint's own shared-prefix request (its `bench.prefix_len` + `bench.suffix_len`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.config.endpoint import Endpoint
from kvtier.planner.model import TierModel
from kvtier.planner.tiers import tier_model
from kvtier.planner.ttft import stored_tokens, ttft

if TYPE_CHECKING:
    from kvtier.config.loader import Config

MAX_CACHE_THRESHOLD = 0.99  # the router takes 0.0-1.0; a match rate is never above 1, so 1.0 would never hold
# Characters per token for the tree budget: the router's tree counts characters (its --max-tree-size help at 0.1.17);
# OpenAI's rule of thumb for English text is about 4 (docs/references.md "Issue 25, part 2").
CHARS_PER_TOKEN = 4
ROUTER_MAX_TREE_SIZE = 2**25  # vllm-router 0.1.17's default --max-tree-size: never above it


@dataclass(frozen=True)
class CacheAwareKnobs:
    """cache_aware's flags for one endpoint, each with the one line that says where its value comes from."""

    cache_threshold: float
    balance_abs_threshold: int
    balance_rel_threshold: float
    max_tree_size: int
    why: dict[str, str]

    def args(self) -> list[str]:
        return [
            "--cache-threshold",
            f"{self.cache_threshold:g}",
            "--balance-abs-threshold",
            str(self.balance_abs_threshold),
            "--balance-rel-threshold",
            f"{self.balance_rel_threshold:g}",
            "--max-tree-size",
            str(self.max_tree_size),
        ]


# vllm-router 0.1.17's own cache_aware defaults (its router_args.py): what `prefixaware` runs with in standalone mode.
ROUTER_DEFAULT_KNOBS = CacheAwareKnobs(
    cache_threshold=0.3,
    balance_abs_threshold=64,
    balance_rel_threshold=1.5,
    max_tree_size=ROUTER_MAX_TREE_SIZE,
    why={},
)


def pool_aware_knobs(tiers: TierModel, prefix_tokens: int, suffix_tokens: int) -> CacheAwareKnobs:
    """The cache_aware knobs under which leaving a prefix's holder costs what the shared L2 says it costs.

    The representative request: a shared prefix of `prefix_tokens` and a new suffix of `suffix_tokens` (the
    endpoint's own shared-prefix workload, its `bench.prefix_len` and `bench.suffix_len`).
    """
    if not tiers.has_l2:
        raise ValueError("pool-aware routing needs a shared L2 (cache.l2: curvine)")
    tokens = max(min(prefix_tokens + suffix_tokens, tiers.max_model_len), 1)
    pooled = stored_tokens(min(prefix_tokens, tokens), tiers.chunk_tokens, tiers.save_unfull_chunk)
    at_holder = ttft(tiers, tokens, l0=pooled).total_s  # the prefix in its L0: only the suffix is prefilled
    # What the holder saves over another replica, which reads the pooled prefix (fixed cost + bytes) instead.
    advantage = ttft(tiers, tokens, l2=pooled).total_s - at_holder
    # What one request in flight ahead on the holder costs a newcomer: its own service there, a prefix hit.
    service = at_holder
    ms = 1000.0
    if service <= 0:
        raise ValueError("the tier model gives a request no service time; check the endpoint's instance and model")
    balance_abs = math.floor(advantage / service)
    # Within the balance threshold the holder may have `balance_abs` more requests ahead: a match of r x tokens is
    # worth that wait when the L2 read it spares (fixed + r x tokens x per-token read) covers it; below, least loaded.
    slack = balance_abs * service - tiers.l2_hit_fixed_s
    threshold = 0.0 if slack <= 0 else min(slack / (tiers.l2_load_s_per_token * tokens), MAX_CACHE_THRESHOLD)
    threshold = round(threshold, 3)
    local = tiers.l0_tokens + tiers.l1_tokens
    tree = max(min(local * CHARS_PER_TOKEN, ROUTER_MAX_TREE_SIZE), 1)
    why = {
        "--cache-threshold": (
            f"{threshold:g}: the holder may have {balance_abs} more request(s) ahead ({balance_abs * service * ms:.0f} ms);"
            " a match is worth that wait when the L2 read it spares (fixed + bytes) costs more"
        ),
        "--balance-abs-threshold": (
            f"{balance_abs}: the holder spares an L2 read of the {pooled:,}-token prefix ({advantage * ms:.0f} ms) and "
            f"each request in flight ahead of it costs a prefix hit's prefill of the rest of {tokens:,} tokens "
            f"({service * ms:.0f} ms): leave it once it has more than {balance_abs} extra"
        ),
        "--balance-rel-threshold": (
            "1: a queue costs its length in requests, whatever the other replica's load: the absolute threshold alone "
            "decides"
        ),
        "--max-tree-size": (
            f"{tree:,}: each replica's own tiers (L0 {tiers.l0_tokens:,} + L1 {tiers.l1_tokens:,} tokens) at "
            f"{CHARS_PER_TOKEN} characters a token; older prefixes are only in the pool, which every replica reads"
        ),
    }
    return CacheAwareKnobs(threshold, balance_abs, 1.0, tree, why)


def endpoint_knobs(config: Config, lob: str, endpoint: Endpoint) -> CacheAwareKnobs | None:
    """The knobs a `routing: poolaware` endpoint's router runs with (None for every other strategy)."""
    if endpoint.routing != "poolaware":
        return None
    tiers = tier_model(config, lob, endpoint.name)
    return pool_aware_knobs(tiers, endpoint.bench.prefix_len, endpoint.bench.suffix_len)
