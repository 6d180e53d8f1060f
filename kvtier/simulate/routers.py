"""The routing strategies the simulator models: production-stack's four, kvtier's pool-aware policy, and the
standalone router's cache_aware (vllm-router), which `prefixaware` and `poolaware` run on in standalone mode.

Load awareness is the same for the two that have it (prefixaware, kvaware): among equally good replicas, and when
a match is too short, the one with the fewest requests waiting or running wins, then a seeded random pick.
production-stack balances on a windowed QPS instead; queue length stands in for it, without its lag. roundrobin
and session are load-blind, as upstream (session falls back to QPS only for requests without a session key, and
every simulated request has one).
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from kvtier.planner.model import TierModel
from kvtier.planner.pool_routing import CHARS_PER_TOKEN, CacheAwareKnobs
from kvtier.serving import KV_AWARE_THRESHOLD
from kvtier.simulate.cache import LRU, SharedPool

Strategy = Literal["roundrobin", "session", "prefixaware", "kvaware", "poolaware"]
STRATEGIES: tuple[Strategy, ...] = ("roundrobin", "session", "prefixaware", "kvaware", "poolaware")
RING_POINTS = 160  # points per replica on the session hash ring (uhashring's ketama default: 40 vnodes x 4)
# PrefixAware's byte array: replica bits a byte holds; the units it covers without a bound on the trace's distinct
# units (its file size, kvtier/simulate/stream.py), and at most (bytes of memory).
BYTE_BITS = 8
DENSE_UNITS = 1 << 20
MAX_DENSE_UNITS = 1 << 32


@dataclass
class ClusterView:
    """What a router may look at: queue lengths always; cache contents only for kvaware.

    `active` lists the replicas that take new requests (all of them unless an autoscaler changes the set,
    kvtier/simulate/elastic.py); `mask` has their bits, and `version` counts the changes. A replica the autoscaler
    adds gets a new index, as a new pod gets a new address: no router has history for it."""

    outstanding: list[int]  # requests waiting or running, per replica
    l0: Sequence[LRU]
    l1: Sequence[LRU]
    rng: random.Random
    l2: SharedPool | None = None  # the shared pool's contents (poolaware only)
    active: list[int] = field(default_factory=list)
    mask: int = 0
    version: int = 0

    def __post_init__(self) -> None:
        if not self.active:
            self.set_active(range(len(self.outstanding)))

    def set_active(self, replicas: Iterable[int]) -> None:
        self.active = sorted(replicas)
        self.mask = sum(1 << r for r in self.active)
        self.version += 1

    def least_loaded(self, candidates: Sequence[int]) -> int:
        if len(candidates) == 1:
            return candidates[0]
        load = self.outstanding
        lowest = min(map(load.__getitem__, candidates))
        best = [r for r in candidates if load[r] == lowest]
        return best[0] if len(best) == 1 else self.rng.choice(best)


class Ask(NamedTuple):
    """What a router sees of a request: its units, its length, its session id, when it arrives."""

    units: tuple[int, ...]
    tokens: int
    session: int
    now: float = 0.0


class Router(Protocol):
    def choose(self, ask: Ask) -> int: ...


class RoundRobin:
    """Each request to the next replica, blind to load and cache."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.count = 0

    def choose(self, _ask: Ask) -> int:
        active = self.view.active
        replica = active[self.count % len(active)]
        self.count += 1
        return replica


class Session:
    """Consistent hash of the session id onto a ring of replicas (sticky, blind to load)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.version = -1
        self.keys: list[int] = []
        self.owners: list[int] = []
        self.memo: dict[int, int] = {}

    def _ring(self) -> None:
        """(Re)build the ring over the active replicas: a member that joins or leaves moves only its share."""
        points = sorted((_hash(f"replica-{r}-{v}"), r) for r in self.view.active for v in range(RING_POINTS))
        self.keys = [p for p, _ in points]
        self.owners = [r for _, r in points]
        self.memo.clear()
        self.version = self.view.version

    def choose(self, ask: Ask) -> int:
        if self.version != self.view.version:
            self._ring()
        replica = self.memo.get(ask.session)
        if replica is None:
            index = bisect.bisect(self.keys, _hash(str(ask.session))) % len(self.keys)
            replica = self.memo[ask.session] = self.owners[index]
        return replica


class PrefixAware:
    """production-stack's history trie: remembers which replicas it sent each prefix to and never sees
    evictions. Longest match wins (queue length, then seeded random, among equals); a match shorter than
    `min_match_tokens` (prefixMinMatchLength, here in tokens) goes to the least-loaded replica. Either way the
    prompt is recorded against the chosen replica.

    Upstream's trie never forgets a prefix (docs/references.md), so this one grows with the distinct units of the
    trace too. It keeps, per unit, the bits of the replicas the unit was sent to (chained ids make that a trie): in
    a byte array indexed by the unit for units below `dense_units` while every replica index fits a byte (trace ids
    are counters: a byte a unit, where a dict entry costs about a hundred), in a dict for the others."""

    def __init__(
        self, view: ClusterView, unit_tokens: int, min_match_tokens: int = 0, dense_units: float = DENSE_UNITS
    ) -> None:
        self.view = view
        self.unit_tokens = unit_tokens
        self.min_match_tokens = min_match_tokens
        self.dense = bytearray()  # unit -> bits, for units below `dense_limit` (grown as they come)
        self.dense_limit = int(min(dense_units, MAX_DENSE_UNITS)) if len(view.outstanding) <= BYTE_BITS else 0
        self.sent: dict[int, int] = {}  # unit -> bits, for the other units

    def choose(self, ask: Ask) -> int:
        units = ask.units
        dense, sent = self.dense, self.sent
        size = len(dense)  # units are never negative (trace ids, adapter key spaces above them)
        view = self.view
        selected = view.mask
        matched = 0
        for unit in units:
            narrowed = (dense[unit] if unit < size else sent.get(unit, 0)) & selected
            if not narrowed:
                break
            selected = narrowed
            matched += 1
        matched_tokens = min(matched * self.unit_tokens, ask.tokens)
        if matched_tokens < self.min_match_tokens:
            replica = view.least_loaded(view.active)
            matched = 0  # the chosen replica may be missing from the matched units' sets
        else:
            replica = view.least_loaded([r for r in view.active if selected >> r & 1])
        # The matched units were sent to every replica in `selected`, the chosen one too: only the rest learn it.
        bit = 1 << replica
        if replica >= BYTE_BITS and self.dense_limit:
            self._undense()
            dense, size = self.dense, 0
        limit = self.dense_limit
        get = sent.get
        for unit in units[matched:]:
            if unit < size:
                dense[unit] |= bit
            elif unit < limit:
                size = self._grow(unit)
                dense[unit] |= bit
            else:
                sent[unit] = get(unit, 0) | bit
        return replica

    def _grow(self, unit: int) -> int:
        """Make the byte array cover `unit` (below `dense_limit`), a quarter more than it had at least; its size."""
        dense = self.dense
        wanted = min(max(unit + 1, len(dense) + len(dense) // 4 + 4096), self.dense_limit)
        dense.extend(bytes(wanted - len(dense)))
        return wanted

    def _undense(self) -> None:
        """A replica index beyond a byte (the autoscaler's new replicas): every unit's bits move to the dict."""
        self.sent.update((unit, bits) for unit, bits in enumerate(self.dense) if bits)
        self.dense = bytearray()
        self.dense_limit = 0


class KvAware:
    """production-stack's kvaware: asks LMCache's controller which replica holds the longest prefix, here in its
    L0 or L1 (the controller hears of L1 admissions, not of L2; L1 is written through, so it mostly covers L0). Routes
    there (queue length, then seeded random, among equals) unless nothing matches or the match is shorter
    than the prompt minus `threshold` tokens (the router's --kv-aware-threshold, KV_AWARE_THRESHOLD by default); then
    to the least-loaded."""

    def __init__(self, view: ClusterView, unit_tokens: int, threshold: int = KV_AWARE_THRESHOLD) -> None:
        self.view = view
        self.unit_tokens = unit_tokens
        self.threshold = threshold

    def choose(self, ask: Ask) -> int:
        units, tokens = ask.units, ask.tokens
        view = self.view
        best = 0
        holders: list[int] = []
        for replica in view.active:
            held0 = view.l0[replica].entries
            held1 = view.l1[replica].entries
            matched = 0
            for unit in units:
                if unit in held0 or unit in held1:
                    matched += 1
                else:
                    break
            if matched > best:
                best, holders = matched, [replica]
            elif matched == best and matched:
                holders.append(replica)
        matched_tokens = min(best * self.unit_tokens, tokens)
        if not best or matched_tokens < max(tokens - self.threshold, 0):
            return view.least_loaded(view.active)
        return view.least_loaded(holders)


class PoolAware:
    """kvtier's pool-aware policy: each request to the replica with the lowest expected TTFT, from the planner's
    numbers (`TierModel`):

        expected TTFT = queue wait + L1 load of the replica's L1 hits + (L2 hit: fixed + tokens x L2 read time)
                        + prefill of what neither holds

    L0 and L1 are the replica's own (L0 costs nothing); L2 is the shared pool, which every replica reads, so a
    prefix in L2 is a near-hit everywhere and a busy replica's cache stops being worth its queue. Queue wait: the
    router's own ledger of the service time it expects for what it sent each replica (per slot), reset when the
    replica is idle. Ties (equal expected TTFT): least loaded, then seeded random."""

    def __init__(self, view: ClusterView, unit_tokens: int, model: TierModel, slots: int = 1) -> None:
        if view.l2 is None:
            raise ValueError("poolaware needs the shared pool in the cluster view")
        self.view = view
        self.pool = view.l2.files
        self.unit_tokens = unit_tokens
        self.model = model
        self.reads_l2 = model.has_l2  # a property of a frozen model: asked once, not per replica and request
        self.slots = max(slots, 1)
        self.free_at = [0.0] * len(view.outstanding)  # when each replica is expected to have worked off its queue

    def expected_service(self, tokens: int, local1: int, pooled: int, hit: int) -> float:
        """Seconds a replica would take for a prompt of `tokens` tokens whose first `hit` units it finds, `local1` of
        them in its L1 and `pooled` in L2 (the rest in its L0, free): L1 loads, one L2 load, the prefill of the rest."""
        model, size = self.model, self.unit_tokens
        hit *= size
        service = model.compute_seconds(tokens, tokens - 1 if hit >= tokens else hit)  # at most tokens - 1 cached
        if local1:
            service += model.l1_load_seconds(local1 * size)
        if pooled and self.reads_l2:
            service += model.l2_load_seconds(pooled * size)
        return service

    def choose(self, ask: Ask) -> int:
        view = self.view
        units, tokens, now = ask.units, ask.tokens, ask.now
        outstanding, free_at = view.outstanding, self.free_at
        if len(free_at) < len(outstanding):  # replicas the autoscaler added
            free_at += [0.0] * (len(outstanding) - len(free_at))
        l0, l1, files = view.l0, view.l1, self.pool
        cold = -1.0  # the service of a replica that holds none of the prompt, once asked
        best: list[int] = []
        best_ttft = math.inf
        services: dict[int, float] = {}
        for replica in view.active:
            held0, held1 = l0[replica].entries, l1[replica].entries
            local0 = local1 = pooled = 0
            for unit in units:
                if unit in held0:
                    local0 += 1
                elif unit in held1:
                    local1 += 1
                elif unit in files:
                    pooled += 1
                else:
                    break
            if local0 or local1 or pooled:
                service = self.expected_service(tokens, local1, pooled, local0 + local1 + pooled)
            else:
                if cold < 0.0:
                    cold = self.expected_service(tokens, 0, 0, 0)
                service = cold
            services[replica] = service
            if not outstanding[replica]:
                free_at[replica] = now
            ttft = max(free_at[replica] - now, 0.0) + service
            if ttft < best_ttft - 1e-12:
                best, best_ttft = [replica], ttft
            elif abs(ttft - best_ttft) <= 1e-12:
                best.append(replica)
        replica = view.least_loaded(best)
        free_at[replica] = max(free_at[replica], now) + services[replica] / self.slots
        return replica


class CacheAware:
    """vllm-router's cache_aware, as the standalone router runs it (docs/references.md "Issue 25, part 2"): when the
    loads (requests in flight) are imbalanced, `max - min > balance_abs_threshold` and `max > balance_rel_threshold x
    min`, the least-loaded replica (the first of equals); else the replica whose approximate tree matches the longest
    prefix if the match is more than `cache_threshold` of the request, else the least loaded. The chosen replica's
    tree learns the prompt. The tree here holds units, not characters: its budget is `max_tree_size` characters at
    CHARS_PER_TOKEN a token, evicted least recently used (upstream evicts on a timer; here at once)."""

    def __init__(self, view: ClusterView, unit_tokens: int, knobs: CacheAwareKnobs) -> None:
        self.view = view
        self.knobs = knobs
        self.capacity = max(knobs.max_tree_size // CHARS_PER_TOKEN // max(unit_tokens, 1), 1)  # units per replica
        self.trees: dict[int, OrderedDict[int, None]] = {}
        self.version = -1

    def _least_loaded(self) -> int:
        load = self.view.outstanding
        return min(self.view.active, key=load.__getitem__)  # the first of equals, as upstream's min_by_key

    def choose(self, ask: Ask) -> int:
        view = self.view
        if self.version != view.version:  # a replica that left loses its tree (upstream removes its tenant)
            self.trees = {r: self.trees.get(r, OrderedDict()) for r in view.active}
            self.version = view.version
        load = view.outstanding
        knobs = self.knobs
        loads = [load[r] for r in view.active]
        low, high = min(loads), max(loads)
        units = ask.units
        if high - low > knobs.balance_abs_threshold and high > low * knobs.balance_rel_threshold:
            replica = self._least_loaded()
        else:
            best = 0
            holders: list[int] = []
            for r, tree in self.trees.items():
                matched = 0
                for unit in units:
                    if unit not in tree:
                        break
                    matched += 1
                if matched > best:
                    best, holders = matched, [r]
                elif matched == best and matched:
                    holders.append(r)
            rate = best / len(units) if units else 0.0
            replica = view.least_loaded(holders) if rate > knobs.cache_threshold else self._least_loaded()
        tree = self.trees[replica]
        for unit in units:
            tree[unit] = None
            tree.move_to_end(unit)
        while len(tree) > self.capacity:
            tree.popitem(last=False)
        return replica


def make_router(
    strategy: str,
    view: ClusterView,
    unit_tokens: int,
    *,
    min_match_tokens: int = 0,
    kv_aware_threshold: int = KV_AWARE_THRESHOLD,
    model: TierModel | None = None,
    slots: int = 1,
    cache_aware: CacheAwareKnobs | None = None,
    max_units: float = math.inf,
) -> Router:
    """`cache_aware`: the knobs the standalone router runs `prefixaware`/`poolaware` with; None models the others.
    `max_units`: at least the distinct units of the trace (kvtier/simulate/stream.py `units_bound`), if known."""
    if cache_aware is not None and strategy in ("prefixaware", "poolaware"):
        return CacheAware(view, unit_tokens, cache_aware)
    if strategy == "roundrobin":
        return RoundRobin(view)
    if strategy == "session":
        return Session(view)
    if strategy == "prefixaware":
        return PrefixAware(view, unit_tokens, min_match_tokens, max_units if math.isfinite(max_units) else DENSE_UNITS)
    if strategy == "kvaware":
        return KvAware(view, unit_tokens, kv_aware_threshold)
    if strategy == "poolaware":
        if model is None:
            raise ValueError("poolaware needs the endpoint's tier model (the planner's numbers)")
        return PoolAware(view, unit_tokens, model, slots)
    raise ValueError(f"unknown routing strategy '{strategy}'; use one of {', '.join(STRATEGIES)}")


def _hash(text: str) -> int:
    # Stable across runs and machines (Python's hash() of str is salted per process).
    return int.from_bytes(hashlib.md5(text.encode(), usedforsecurity=False).digest()[:8], "big")
