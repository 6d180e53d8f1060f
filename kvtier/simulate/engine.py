"""Discrete-event replay of a trace through an endpoint's replicas, cache tiers and router.

Events, in time order (a prefill finishing before a request arriving at the same instant):
- arrival: requests longer than max_model_len are skipped; the router picks a replica (seeing queue lengths, and
  for kvaware the caches); the replica starts it if one of its `slots` is free, else queues it (FIFO).
- start: the prompt's units are looked up L0, then L1, then L2, and the match stops at the first unit in none
  (vLLM and LMCache match prefixes). Service = loading L1/L2 hits + recomputing the rest; L0 hits are free. An L2
  hit costs the planner's fixed part plus its bytes over the node's NIC, split among the L2 loads in flight on that
  node when it starts (an approximation: a load does not slow down once started).
- finish: the prompt's units are now in the replica's L0 and L1 (LRU); L2 gets the units past the prefix LMCache
  already held in L1 or L2 (its skip_leading_tokens), written by this replica; the next queued request starts.
  TTFT = queueing + service.
The janitor sweeps L2 every 30 seconds of simulated time, as deployed (see `SharedPool`).

With roundrobin or session routing and one slot, each replica's L0/L1 see the same sequence whatever the sizes,
so a larger L0 never lowers the hit rate, nor does a larger L1 without L2 (with L2, a larger L1 means fewer L2
writes, as in LMCache, and later misses are possible).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass

from kvtier.errors import UsageError
from kvtier.planner.model import TierModel
from kvtier.planner.pool_routing import CacheAwareKnobs
from kvtier.planner.ttft import ttft
from kvtier.serving import KV_AWARE_THRESHOLD  # the deployed router's (a light module: no cdk8s)
from kvtier.simulate.cache import LRU, SharedPool
from kvtier.simulate.result import ReplicaLoad, SimResult, TierTokens, TtftSample
from kvtier.simulate.routers import STRATEGIES, Ask, ClusterView, make_router
from kvtier.simulate.trace import Request, UnitTrace, to_units
from kvtier.sizing import JANITOR_INTERVAL_SECONDS, JANITOR_TARGET_FRACTION
from kvtier.trace import Trace

BASE_MODEL = "base"  # the per-adapter key of requests without an adapter
PROGRESS_EVERY = 256  # requests between progress callbacks
# An event in a replay's heap: (at, sequence, replica, request, LMCache's known prefix in units) for a prefill that
# ends; the autoscaler's (kvtier/simulate/elastic.py) put a negative kind in place of the replica.
Event = tuple[float, int, int, Request, int]
# The L2 janitor kvtier deploys (kvtier/k8s/curvine/janitor.py): a pass every JANITOR_INTERVAL_SECONDS, and once over
# budget it deletes down to JANITOR_TARGET_FRACTION of it (both from kvtier.sizing, which the chart reads too).
JANITOR_EVERY_S = float(JANITOR_INTERVAL_SECONDS)


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulation needs besides the tier model and the trace."""

    routing: str = "roundrobin"
    slots: int = 1  # requests a replica prefills at once, each at full speed (1: one GPU, one prefill)
    seed: int = 0  # random tie-breaks of the load-aware routers
    qps_scale: float = 1.0  # 2.0 replays the trace at twice its request rate
    l2_max_age_s: float | None = None  # the janitor's max age (the LOB's l2.max_age_hours); None: no TTL
    janitor_every_s: float = JANITOR_EVERY_S  # janitor sweep period; 0 applies age and budget at every write
    l2_target_fraction: float = JANITOR_TARGET_FRACTION  # an over-budget sweep deletes down to this share
    prefix_min_match_tokens: int = 0  # prefixaware: shorter matches go to the least-loaded replica
    kv_aware_threshold: int = KV_AWARE_THRESHOLD  # kvaware: fall back when matched < prompt - threshold tokens
    # Standalone mode: prefixaware/poolaware run on vllm-router's cache_aware with these knobs (routers.CacheAware)
    cache_aware: CacheAwareKnobs | None = None

    def __post_init__(self) -> None:
        if self.routing not in STRATEGIES:
            raise UsageError(f"unknown routing strategy '{self.routing}'; use one of {', '.join(STRATEGIES)}")
        if self.slots < 1:
            raise UsageError(f"slots {self.slots} is below 1; give at least one concurrent prefill per replica")
        if not (math.isfinite(self.qps_scale) and self.qps_scale > 0):
            raise UsageError(f"qps scale {self.qps_scale} is not positive; give a finite factor > 0")
        age = self.l2_max_age_s
        if not (math.isfinite(self.janitor_every_s) and self.janitor_every_s >= 0) or (
            age is not None and not (math.isfinite(age) and age > 0)
        ):
            raise UsageError("janitor period and L2 max age must be positive; give seconds > 0 (period 0: always)")
        if not 0 < self.l2_target_fraction <= 1:
            raise UsageError(f"L2 target fraction {self.l2_target_fraction} is outside (0, 1]; give e.g. 0.9")


def partial_key(unit: int, chunks: int, chunks_per_unit: int) -> int:
    """The cache key of the first `chunks` whole chunks of `unit`: negative, so never a trace's (non-negative) id."""
    return -1 - (unit * chunks_per_unit + chunks)


def simulate(
    trace: Trace | UnitTrace,
    model: TierModel,
    config: SimConfig,
    progress: Callable[[int], None] | None = None,
) -> SimResult:
    """Replay `trace` (a `Trace`, or one already mapped with `to_units(trace, model.chunk_tokens, qps_scale)`)."""
    check_model(model)
    units = trace if isinstance(trace, UnitTrace) else to_units(trace, model.chunk_tokens, config.qps_scale)
    return Replay(model, config, units.unit_tokens, progress).run(units.requests())


def check_model(model: TierModel) -> None:
    """One line naming what the tier model lacks to be simulated."""
    if model.replicas < 1:
        raise UsageError(f"replicas {model.replicas} is below 1; simulate at least one replica")
    speeds = {"prefill_s_per_token": model.prefill_s_per_token}
    speeds["prefill_s_per_token_squared"] = model.prefill_s_per_token_squared
    if model.l1_tokens > 0:
        speeds["l1_load_s_per_token"] = model.l1_load_s_per_token
    for name, value in speeds.items():
        if not math.isfinite(value) or value < 0:
            raise UsageError(
                f"the tier model's {name} is {value}; the catalog lacks a speed for this instance type "
                "(set it in the environment's catalog_overrides)"
            )


class Replay:
    """State of one replay, fed one request at a time in arrival order (`feed`, then `result`); its methods are the
    three events (kvtier/simulate/elastic.py adds the autoscaler's). It keeps the requests queued or running, never
    the trace: several replays can consume one stream of requests together (kvtier/simulate/stream.py)."""

    def __init__(
        self,
        model: TierModel,
        config: SimConfig,
        unit_tokens: int,
        progress: Callable[[int], None] | None = None,
        max_units: float = math.inf,
    ) -> None:
        """`max_units`: at least every unit the trace can name (kvtier/simulate/stream.py bounds it by the file's
        size); a tier at least that large never evicts and keeps no order of use (`LRU`)."""
        self.max_units = max_units
        self.model = model
        self.config = config
        self.progress = progress
        self.unit_tokens = size = unit_tokens
        replicas = model.replicas
        self.l0: list[LRU] = []
        self.l1: list[LRU] = []
        self.queues: list[deque[Request]] = []
        self.running: list[int] = []
        self.served: list[int] = []
        self.busy: list[float] = []
        # L2 loads in flight per node (their end times): they share the node's NIC (TierModel.l2_load_seconds).
        self.l2_reads: list[list[float]] = []
        self.replicas_per_node = max(model.replicas_per_node, 1)
        l2_units = model.l2_tokens // size if model.has_l2 else 0  # no L2 backend: no capacity, infinite load time
        self.l2 = SharedPool(l2_units, config.l2_max_age_s, config.janitor_every_s, config.l2_target_fraction)
        self.view = ClusterView([], self.l0, self.l1, random.Random(config.seed), self.l2)
        for _ in range(replicas):
            self.add_replica()
        self.view.set_active(range(replicas))
        self.router = make_router(
            config.routing,
            self.view,
            size,
            min_match_tokens=config.prefix_min_match_tokens,
            kv_aware_threshold=config.kv_aware_threshold,
            model=model,
            slots=config.slots,
            cache_aware=config.cache_aware,
            max_units=max_units,
        )
        self.events: list[Event] = []
        self.sequence = 0
        self.ttft = TtftSample()
        # Tokens per tier (l0, l1, l2 same, l2 other, miss) per LoRA adapter (None: the base model, issue 35); the
        # totals are their sum.
        self.per_adapter: dict[str | None, list[int]] = {}
        self.last_hits: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # the tiers of the last request started
        self.last_done = 0.0
        self.first_arrival: float | None = None
        self.requests = self.skipped = self.skipped_tokens = 0
        self.limit = model.max_model_len
        # LMCache chunks per simulated unit (2: 256-token chunks in 512-token trace blocks); above 1, a prompt
        # ending inside a unit stores that unit's whole chunks apart (see `partial_key`).
        self.chunks_per_unit = max(size // model.chunk_tokens, 1)

    def add_replica(self) -> int:
        """A new replica with empty L0 and L1 (a new pod); returns its index. It takes requests once the view lists
        it as active."""
        size, model = self.unit_tokens, self.model
        self.l0.append(LRU(model.l0_tokens // size, fits_all=model.l0_tokens // size >= self.max_units))
        self.l1.append(LRU(model.l1_tokens // size, fits_all=model.l1_tokens // size >= self.max_units))
        self.queues.append(deque())
        self.running.append(0)
        self.served.append(0)
        self.busy.append(0.0)
        self.view.outstanding.append(0)
        replica = len(self.l0) - 1
        while len(self.l2_reads) <= replica // self.replicas_per_node:
            self.l2_reads.append([])
        return replica

    def run(self, requests: Iterable[Request]) -> SimResult:
        """Feed every request (in arrival order), then the result; `progress` gets the requests fed so far."""
        progress = self.progress
        feed = self.feed
        for index, request in enumerate(requests):
            if progress is not None and index % PROGRESS_EVERY == 0:
                progress(index)
            feed(request)
        return self.result()

    def feed(self, request: Request) -> None:
        """The next request of the trace (arrival times never go back): first every event due by its arrival."""
        now = request[0]
        events = self.events
        if events and events[0][0] <= now:
            finish, pop = self.finish, heapq.heappop
            while events and events[0][0] <= now:
                finish(*pop(events))
        if self.first_arrival is None:
            self.first_arrival = now
        self.requests += 1
        if request[1] > self.limit:
            self.skipped += 1
            self.skipped_tokens += request[1]
            return
        self.arrive(request, now)

    def result(self) -> SimResult:
        """Run what is still queued or running to its end, and sum the replay up."""
        events = self.events
        while events:
            self.finish(*heapq.heappop(events))
        if self.progress is not None:
            self.progress(self.requests)
        config = self.config
        counts = self.per_adapter
        totals = [sum(column) for column in zip(*counts.values(), strict=True)] or [0] * 5
        first = self.first_arrival if self.first_arrival is not None else 0.0
        return SimResult(
            routing=config.routing,
            replicas=self.model.replicas,
            slots=config.slots,
            seed=config.seed,
            qps_scale=config.qps_scale,
            unit_tokens=self.unit_tokens,
            l0_tokens=self.model.l0_tokens,
            l1_tokens=self.model.l1_tokens,
            l2_tokens=self.model.l2_tokens,
            requests=self.requests,
            served=len(self.ttft),
            skipped=self.skipped,
            skipped_tokens=self.skipped_tokens,
            tokens=TierTokens(*totals),
            ttft_s=self.ttft.summary(),
            per_replica=tuple(ReplicaLoad(n, b) for n, b in zip(self.served, self.busy, strict=True)),
            makespan_s=max(self.last_done - first, 0.0),
            l2_written_units=self.l2.written,
            l2_deleted_units=self.l2.deleted,
            l2_peak_units=self.l2.peak,
            # Per adapter only when the trace named one: then the base model's requests count as BASE_MODEL.
            per_adapter={}
            if set(counts) <= {None}
            else {name or BASE_MODEL: TierTokens(*tokens) for name, tokens in sorted(counts.items(), key=_by_name)},
        )

    def arrive(self, request: Request, now: float) -> None:
        # tuple.__new__: a NamedTuple's own constructor costs three times as much, once per request and run
        replica = self.router.choose(tuple.__new__(Ask, (request[2], request[1], request[3], now)))
        self.view.outstanding[replica] += 1
        self.served[replica] += 1
        if self.running[replica] < self.config.slots:
            self.running[replica] += 1
            self.start(replica, request, now)
        else:
            self.queues[replica].append(request)

    def start(self, replica: int, request: Request, now: float) -> None:
        arrival, tokens, units, _, adapter = request
        size = self.unit_tokens
        held0 = self.l0[replica].entries
        held1 = self.l1[replica].entries
        l2 = self.l2
        if now >= l2.next_sweep or l2.always:
            l2.advance(now)
        files = l2.files
        counts = [0, 0, 0, 0]
        tier = -1
        known = 0  # LMCache's own prefix (in L1 or L2): it stores only what follows
        extra = 0  # tokens of the first missing unit that LMCache holds as whole chunks (a shorter prompt's tail)
        for position, unit in enumerate(units):
            if unit in held0:
                tier = 0
                if known == position and (unit in held1 or unit in files):
                    known += 1
            else:
                if unit in held1:
                    tier = 1
                else:
                    stamp = files.get(unit)
                    if stamp is None:
                        if self.chunks_per_unit > 1:
                            extra, tier = self._partial(unit, held1, files, replica, tier)
                        break
                    tier = 2 if stamp[1] == replica else 3
                if known == position:
                    known += 1
            counts[tier] += 1
        hits = [counts[0] * size, counts[1] * size, counts[2] * size, counts[3] * size]
        if extra:
            hits[tier] += extra
        hit_tokens = sum(hits)
        if hit_tokens > tokens:  # every unit hit: the last one is partial
            hits[tier] -= hit_tokens - tokens
            hit_tokens = tokens
        self._count(adapter, hits, tokens - hit_tokens)
        reads = self.l2_reads[replica // self.replicas_per_node] if hits[2] or hits[3] else None
        if reads is not None:
            reads[:] = [end for end in reads if end > now]
        parts = ttft(self.model, tokens, hits[0], hits[1], hits[2] + hits[3], len(reads) + 1 if reads else 1)
        if reads is not None and parts.l2_read_s:
            reads.append(now + parts.l2_read_s + parts.l2_overhead_s)
        service = parts.total_s
        done = now + service
        self.busy[replica] += service
        self.ttft.add(done - arrival)
        self.sequence += 1
        heapq.heappush(self.events, (done, self.sequence, replica, request, known))

    def _count(self, adapter: str | None, hits: list[int], missed: int) -> None:
        """Add one request's tokens per tier to its adapter's totals (None: the base model)."""
        totals = self.per_adapter.get(adapter)
        if totals is None:
            totals = self.per_adapter[adapter] = [0, 0, 0, 0, 0]
        totals[0] += hits[0]
        totals[1] += hits[1]
        totals[2] += hits[2]
        totals[3] += hits[3]
        totals[4] += missed
        self.last_hits = (hits[0], hits[1], hits[2], hits[3], missed)

    def _partial(
        self, unit: int, held1: Container[int], files: Mapping[int, tuple[float, int]], replica: int, tier: int
    ) -> tuple[int, int]:
        """(tokens, tier) of the whole chunks of `unit` LMCache holds from a prompt that ended inside it; (0, the
        tier of the units before) when none."""
        for chunks in range(self.chunks_per_unit - 1, 0, -1):
            key = partial_key(unit, chunks, self.chunks_per_unit)
            if key in held1:
                return chunks * self.model.chunk_tokens, 1
            stamp = files.get(key)
            if stamp is not None:
                return chunks * self.model.chunk_tokens, 2 if stamp[1] == replica else 3
        return 0, tier

    def finish(self, done: float, _sequence: int, replica: int, request: Request, known: int) -> None:
        _, tokens, units, _, _ = request
        self.l0[replica].store(units)  # vLLM keeps every block it computed or loaded
        # LMCache saves whole chunks (save_unfull_chunk off, as kvtier renders it; kvtier/planner/ttft.py), to L1
        # and L2, past the prefix it already had; what it loaded from L2 it writes back to L1. A prompt that ends
        # inside a unit leaves that unit's whole chunks under their own key.
        tail = tokens % self.unit_tokens
        if tail and not self.model.save_unfull_chunk:
            chunks = tail // self.model.chunk_tokens if self.chunks_per_unit > 1 else 0
            units = (*units[:-1], partial_key(units[-1], chunks, self.chunks_per_unit)) if chunks else units[:-1]
        self.l1[replica].store(units)
        l2 = self.l2
        if done >= l2.next_sweep or l2.always:
            l2.advance(done)
        l2.store(units[known:], replica, done)
        self.view.outstanding[replica] -= 1
        self.last_done = max(self.last_done, done)
        queue = self.queues[replica]
        if queue:
            self.start(replica, queue.popleft(), done)
        else:
            self.running[replica] -= 1


def _by_name(item: tuple[str | None, list[int]]) -> str:
    return item[0] or BASE_MODEL
