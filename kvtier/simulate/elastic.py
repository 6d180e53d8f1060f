"""Elasticity: replay a trace while an autoscaler adds and removes replicas, as KEDA's HPA would.

KEDA polls its trigger every `polling_s`; from 1 to N replicas the Kubernetes HPA decides (KEDA's own cooldownPeriod
only governs scaling to zero), with its defaults: desired = ceil(requests in flight / target per replica), no change
within a 10% tolerance of the target, scale-up at once but at most to max(2 x current, current + 4) per decision,
scale-down to the highest recommendation of the last `cooldown_s` (the HPA's scale-down stabilization window; kvtier
maps the endpoint's cooldown_period_s onto it). Sources: docs/references.md, "Issue 27 (part C)".

A new replica is a new pod: it holds GPUs from the decision on, takes requests only `startup_s` later (vLLM start
and weight load), and starts with empty L0 and L1 (new `LRU`s under a new index no router has history for). The
shared L2 persists, so its first requests read the prefixes other replicas wrote; without L2 it prefills them.
A replica removed stops taking requests, works off what it holds (Kubernetes sends SIGTERM and waits for the grace
period; the router retries what fails, issue 27 item 3) and holds its GPUs until then; the Deployment removes
replicas still starting first, then the newest ready ones (ReplicaSet's deletion ranking).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kvtier.errors import UsageError
from kvtier.planner.model import TierModel
from kvtier.simulate.engine import Replay, SimConfig, check_model
from kvtier.simulate.result import SimResult, TierTokens
from kvtier.simulate.trace import Request, UnitTrace, to_units
from kvtier.trace import Trace

# vLLM's own figure for reloading a model: "30-100+ seconds" (blog.vllm.ai, 2025-10-26, "Zero-Reload Model
# Switching with vLLM Sleep Mode"); its maintainers measured 215 s for Llama-70B on 8 GPUs and about 60 s from
# start to first answer for a 3B model with a warm compile cache (vllm-project/vllm#19824, #20264). docs/references.md.
STARTUP_S = 100.0
# Requests waiting or running per replica the autoscaler aims at: a policy choice, not an upstream default (one
# running and one waiting per prefill slot of the simulator's one-slot replica); `kvtier plan` proposes one (issue 27).
TARGET_INFLIGHT = 2.0
HPA_TOLERANCE = 0.1  # kube-controller-manager --horizontal-pod-autoscaler-tolerance default
HPA_SCALE_UP_PODS = 4  # default scale-up policy: +4 pods or +100%, the larger (autoscaling/v2 HPAScalingRules)
MAX_POLLS = 1_000_000  # decisions a replay may take (trace span / polling interval): bounded time
TICK = -1  # event kinds in the engine's heap (a replica index is >= 0)
READY = -2
NO_REQUEST: Request = (0.0, 0, (), 0, None)  # the request slot of an autoscaler event


@dataclass(frozen=True)
class ScalePolicy:
    min_replicas: int
    max_replicas: int
    target_inflight: float = TARGET_INFLIGHT
    polling_s: float = 30.0  # KEDA's pollingInterval default
    cooldown_s: float = 300.0  # the HPA's scale-down stabilization window default
    startup_s: float = STARTUP_S

    def __post_init__(self) -> None:
        problems = (
            (self.min_replicas < 1, f"--min-replicas {self.min_replicas} is below 1; give 1 or more"),
            (
                self.max_replicas < self.min_replicas,
                f"--max-replicas {self.max_replicas} is below --min-replicas {self.min_replicas}; give max >= min",
            ),
            (
                not _positive(self.target_inflight),
                f"--target-inflight {self.target_inflight} is not positive; give requests per replica > 0",
            ),
            (not _positive(self.polling_s), f"--polling-s {self.polling_s} is not positive; give seconds > 0"),
            (not _at_least_zero(self.cooldown_s), f"--cooldown-s {self.cooldown_s} is negative; give seconds >= 0"),
            (
                not _at_least_zero(self.startup_s),
                f"--startup-s {self.startup_s} is negative; give the seconds a new replica takes to serve, >= 0",
            ),
        )
        for failed, message in problems:
            if failed:
                raise UsageError(message)


@dataclass(frozen=True)
class NewReplica:
    """A replica the autoscaler added: when it became ready and what its first request hit (None: it served none)."""

    replica: int
    ready_s: float  # from the first arrival
    first: TierTokens | None
    first_start_s: float | None = None  # when its first request started, from the first arrival


@dataclass(frozen=True)
class ElasticResult:
    result: SimResult
    policy: ScalePolicy
    gpu_hours: float
    scale_ups: int  # replicas added
    scale_downs: int  # replicas removed
    peak_replicas: int  # most replicas holding GPUs at once
    timeline: tuple[tuple[float, int, int], ...]  # (seconds from the first arrival, ready, holding GPUs)
    served: tuple[tuple[float, float], ...]  # (arrival from the first arrival, TTFT) of each served request
    new_replicas: tuple[NewReplica, ...]


def simulate_elastic(
    trace: Trace | UnitTrace,
    model: TierModel,
    config: SimConfig,
    policy: ScalePolicy,
    gpus_per_replica: int = 1,
    progress: Callable[[int], None] | None = None,
) -> ElasticResult:
    """Replay `trace` starting from `policy.min_replicas` replicas (KEDA scales to minReplicaCount at creation)."""
    units = trace if isinstance(trace, UnitTrace) else to_units(trace, model.chunk_tokens, config.qps_scale)
    arrivals = units.arrival_s
    span = arrivals[-1] - arrivals[0] if arrivals else 0.0
    if span < policy.polling_s:
        raise UsageError(
            f"the trace spans {span:g} s, shorter than one polling interval ({policy.polling_s:g} s): the autoscaler "
            "would never decide; give a longer trace, a --qps-scale below 1 (a slower replay) or a smaller --polling-s"
        )
    if span / policy.polling_s > MAX_POLLS:
        raise UsageError(
            f"--polling-s {policy.polling_s:g} over a trace of {span:g} s makes more than {MAX_POLLS:,} decisions; "
            "give a larger --polling-s"
        )
    check_model(model)
    run = _ElasticRun(units, dataclasses.replace(model, replicas=policy.min_replicas), config, progress, policy)
    return run.run_elastic(units, gpus_per_replica)


class _ElasticRun(Replay):
    def __init__(
        self,
        trace: UnitTrace,
        model: TierModel,
        config: SimConfig,
        progress: Callable[[int], None] | None,
        policy: ScalePolicy,
    ) -> None:
        super().__init__(model, config, trace.unit_tokens, progress)
        self.policy = policy
        self.t0 = trace.arrival_s[0]
        self.last_arrival = trace.arrival_s[-1]
        self.born = dict.fromkeys(range(model.replicas), self.t0)  # replica -> when it took its GPUs
        self.gone: dict[int, float] = {}  # replica -> when it gave them back
        self.starting: dict[int, float] = {}  # replica -> when it will be ready
        self.draining: set[int] = set()
        self.awaiting_first: set[int] = set()
        self.first: dict[int, TierTokens] = {}
        self.first_start: dict[int, float] = {}
        self.ready_at: dict[int, float] = {}
        self.recommendations: deque[tuple[float, int]] = deque()
        self.timeline: list[tuple[float, int, int]] = []  # the first decision, at the first arrival, opens it
        self.served_at: list[tuple[float, float]] = []
        self.ups = self.downs = 0
        self.peak = model.replicas

    def run_elastic(self, trace: UnitTrace, gpus_per_replica: int) -> ElasticResult:
        self._push(self.t0, TICK, 0)
        result = self.run(trace.requests())
        end = max(self.last_done, self.t0)
        held = sum(self.gone.get(r, end) - born for r, born in self.born.items())
        return ElasticResult(
            result=result,
            policy=self.policy,
            gpu_hours=held * gpus_per_replica / 3600.0,
            scale_ups=self.ups,
            scale_downs=self.downs,
            peak_replicas=self.peak,
            timeline=tuple(self.timeline),
            served=tuple(self.served_at),
            new_replicas=tuple(
                NewReplica(r, at - self.t0, self.first.get(r), self.first_start.get(r))
                for r, at in sorted(self.ready_at.items())
            ),
        )

    def _push(self, at: float, kind: int, replica: int) -> None:
        """An autoscaler event: its kind where a prefill's replica goes, the replica where its known prefix goes."""
        self.sequence += 1
        heapq.heappush(self.events, (at, self.sequence, kind, NO_REQUEST, replica))

    def start(self, replica: int, request: Request, now: float) -> None:
        super().start(replica, request, now)
        self.served_at.append((request[0] - self.t0, self.ttft.last))
        if replica in self.awaiting_first:
            self.awaiting_first.discard(replica)
            self.first[replica] = TierTokens(*self.last_hits)
            self.first_start[replica] = now - self.t0

    def finish(self, done: float, sequence: int, replica: int, request: Request, known: int) -> None:
        if replica == TICK:
            self._tick(done)
            return
        if replica == READY:
            self._ready(known, done)
            return
        super().finish(done, sequence, replica, request, known)
        if replica in self.draining and not self.view.outstanding[replica]:
            self.draining.discard(replica)
            self.gone[replica] = done

    def _holding(self) -> int:
        return len(self.born) - len(self.gone)

    def _tick(self, now: float) -> None:
        policy, view = self.policy, self.view
        current = len(view.active) + len(self.starting)  # the Deployment's replicas: ready and starting
        inflight = sum(view.outstanding[r] for r in view.active)
        ratio = inflight / (policy.target_inflight * current)
        wanted = current if abs(ratio - 1.0) <= HPA_TOLERANCE else math.ceil(inflight / policy.target_inflight)
        wanted = min(max(wanted, policy.min_replicas), policy.max_replicas)
        window = self.recommendations
        window.append((now, wanted))
        while window[0][0] < now - policy.cooldown_s:
            window.popleft()
        if wanted > current:
            self._scale_up(now, min(wanted, max(2 * current, current + HPA_SCALE_UP_PODS)) - current)
        else:
            stable = max(r for _, r in window)
            if stable < current:
                self._scale_down(now, current - stable)
        self.timeline.append((now - self.t0, len(view.active), self._holding()))
        if now < self.last_arrival or any(view.outstanding) or self.starting:
            self._push(now + policy.polling_s, TICK, 0)

    def _scale_up(self, now: float, count: int) -> None:
        for _ in range(count):
            replica = self.add_replica()
            self.born[replica] = now
            self.starting[replica] = now + self.policy.startup_s
            self._push(now + self.policy.startup_s, READY, replica)
        self.ups += count
        self.peak = max(self.peak, self._holding())

    def _scale_down(self, now: float, count: int) -> None:
        self.downs += count
        for replica in sorted(self.starting, reverse=True)[:count]:  # not ready yet: removed first
            del self.starting[replica]
            self.gone[replica] = now
            count -= 1
        if count <= 0:
            return
        active = self.view.active
        leaving = active[len(active) - count :]  # the newest ready ones (highest index: added last)
        self.view.set_active(active[: len(active) - count])
        for replica in leaving:
            if self.view.outstanding[replica]:
                self.draining.add(replica)
            else:
                self.gone[replica] = now

    def _ready(self, replica: int, now: float) -> None:
        if self.starting.pop(replica, None) is None:
            return  # removed while starting
        self.view.set_active([*self.view.active, replica])
        self.awaiting_first.add(replica)
        self.ready_at[replica] = now
        self.timeline.append((now - self.t0, len(self.view.active), self._holding()))


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _at_least_zero(value: float) -> bool:
    return math.isfinite(value) and value >= 0
