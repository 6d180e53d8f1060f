"""Autoscaling proposals from an endpoint's plan: a target for each of kvtier's signals and min/max replicas, each
with the one line that says why (docs/endpoints.md "Autoscaling"). The user copies what fits into `autoscaling:`
and can override every number; validate never fills one in.

The costs are the one TTFT model's (kvtier/planner/ttft.py) for the plan's prompt length: a cold prefill, and (with
an L2) the read of a prompt another replica prefilled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.planner.ttft import cold_ttft, l2_hit_ttft

if TYPE_CHECKING:
    from kvtier.config.endpoint import Endpoint, Signal
    from kvtier.config.lob import LineOfBusiness
    from kvtier.planner.model import TierModel

BUSY = 0.7  # scale out when a replica spends this share of its time prefilling or loading from L2
TTFT_SHARE = 0.8  # scale out at this share of the SLO: the HPA ignores changes within 10%, a replica takes minutes


def surge_gpus(endpoint: Endpoint) -> int:
    """GPUs of the pod a rolling update adds before it removes one (operator mode only)."""
    return endpoint.tensor_parallel if endpoint.mode == "operator" else 0


@dataclass(frozen=True)
class Proposal:
    name: str  # a signal, or min_replicas / max_replicas
    value: float
    why: str


def _secs(s: float) -> str:
    return f"{s * 1000:,.0f} ms" if s < 1 else f"{s:,.2f} s"


def quota_replicas(lob: LineOfBusiness, endpoint: Endpoint) -> int:
    """The most replicas the LOB's gpu_quota leaves this endpoint once the others sit at their maximums (the quota
    rule's arithmetic: max replicas x tensor_parallel + one surge pod per operator endpoint)."""
    others = sum(e.max_replicas * e.tensor_parallel + surge_gpus(e) for e in lob.endpoints if e is not endpoint)
    return max((lob.gpu_quota - others - surge_gpus(endpoint)) // endpoint.tensor_parallel, 0)


def propose(
    lob: LineOfBusiness, endpoint: Endpoint, tiers: TierModel, prompt_tokens: int, slo_s: float
) -> tuple[Proposal, ...]:
    """min/max replicas and one target per signal the endpoint exports (no L2 signal without an L2)."""
    n = prompt_tokens
    cold = cold_ttft(tiers, n).total_s
    warm = l2_hit_ttft(tiers, n).total_s if tiers.has_l2 else cold
    served = "an L2 hit" if tiers.has_l2 else "a cold prefill"
    room = math.floor((slo_s - warm) / warm) if warm > 0 else 1
    queue = max(room, 1)
    queue_why = (
        f"a waiting {n:,}-token request waits about {_secs(warm)} ({served}) per request ahead: {queue} ahead keep "
        f"its TTFT within the {_secs(slo_s)} SLO"
        if room >= 1
        else f"one {n:,}-token request ({served}, {_secs(warm)}) already fills the {_secs(slo_s)} SLO: scale on any "
        "queue"
    )
    prefill_rate = n / cold
    signals: list[tuple[Signal, float, str]] = [
        ("queue_per_replica", queue, queue_why),
        (
            "ttft_p90_over_slo",
            TTFT_SHARE,
            f"scale out at {TTFT_SHARE:.0%} of the SLO: the HPA ignores changes within 10% and a new replica takes "
            "minutes to start",
        ),
        (
            "computed_tokens_per_replica",
            round(BUSY * prefill_rate),
            f"a replica prefills {n:,} tokens in {_secs(cold)} ({prefill_rate:,.0f} tokens/s): scale out at "
            f"{BUSY:.0%} busy",
        ),
    ]
    if tiers.has_l2:
        hit = l2_hit_ttft(tiers, n)
        loaded = n - 1  # at most N - 1 tokens are cached (ttft.py); the hit's read and overhead load them
        load_rate = loaded / (hit.l2_read_s + hit.l2_overhead_s)
        signals.append(
            (
                "l2_hit_tokens_per_replica",
                round(BUSY * load_rate),
                f"a replica loads a {n:,}-token prefix from L2 in {_secs(hit.l2_read_s + hit.l2_overhead_s)} "
                f"({load_rate:,.0f} tokens/s): scale out at {BUSY:.0%} busy",
            )
        )
    top = quota_replicas(lob, endpoint)
    if tiers.has_l2 and warm < cold:
        low, low_why = (
            1,
            f"a new replica reads shared prefixes from L2 ({_secs(warm)} vs {_secs(cold)} cold): no warm spare needed",
        )
    else:
        why = (
            f"an L2 hit of {n:,} tokens ({_secs(warm)}) is no faster than prefilling it ({_secs(cold)})"
            if tiers.has_l2
            else "without an L2 a new replica prefills every prefix cold"
        )
        low, low_why = endpoint.replicas, f"{why}: keep today's replicas as the floor"
    high = max(top, low)
    high_why = (
        f"gpu_quota {lob.gpu_quota} leaves {top} x TP {endpoint.tensor_parallel} once the LOB's other endpoints are at "
        "their maximums"
        + (" and one rolling-update pod is kept free" if surge_gpus(endpoint) else "")
        + ("" if top >= low else f" (below min {low}: raise gpu_quota)")
    )
    return (
        Proposal("min_replicas", low, low_why),
        Proposal("max_replicas", high, high_why),
        *(Proposal(signal, value, why) for signal, value, why in signals),
    )
