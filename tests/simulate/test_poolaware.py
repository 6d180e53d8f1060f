"""kvtier's pool-aware routing in the simulator: the replica with the lowest expected TTFT from the tier model."""

from __future__ import annotations

import dataclasses
import random

import pytest

from kvtier.simulate import SimConfig, simulate
from kvtier.simulate.routers import ClusterView, make_router
from tests.simulate.test_engine import BASE, BLOCK, trace

POOLED = dataclasses.replace(BASE, replicas=2, l2_tokens=10**9)


def test_an_idle_holder_keeps_its_prefix() -> None:
    """Nothing queued: the replica holding the prefix in L0 costs nothing to load it, the other an L2 read."""
    rows = trace((0, [1, 2, 3, 4]), (100, [1, 2, 3, 4, 5]))
    result = simulate(rows, POOLED, SimConfig(routing="poolaware"))
    assert sorted(p.requests for p in result.per_replica) == [0, 2]
    assert (result.tokens.l0, result.tokens.l2_other) == (4 * BLOCK, 0)


def test_a_busy_holder_loses_to_a_peer_reading_the_shared_l2() -> None:
    """The holder is busy for seconds; the idle peer loads the prefix from L2 in a fraction of that."""
    prefix = list(range(1, 9))
    rows = trace(
        (0, prefix),  # stored to L2 when done (about 4.1 s)
        (5, [*prefix, *range(100, 120)]),  # follows its prefix to the holder, which is then busy for ~10 s
        (6, [*prefix, 200]),
    )
    pool = simulate(rows, POOLED, SimConfig(routing="poolaware"))
    assert sorted(p.requests for p in pool.per_replica) == [1, 2]
    assert pool.tokens.l2_other == len(prefix) * BLOCK  # the peer read the whole prefix from the pool
    trie = simulate(rows, POOLED, SimConfig(routing="prefixaware"))
    assert sorted(p.requests for p in trie.per_replica) == [0, 3]  # the trie waits for the holder
    # The third request's TTFT: an L2 read and one block of prefill, not the holder's queue.
    assert pool.ttft_s["mean"] < trie.ttft_s["mean"]


def test_poolaware_needs_the_tier_model() -> None:
    view = ClusterView([0, 0], [], [], random.Random(0))
    with pytest.raises(ValueError, match="tier model"):
        make_router("poolaware", view, BLOCK)
