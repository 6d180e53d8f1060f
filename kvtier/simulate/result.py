"""What one simulation run reports: tokens served per tier, TTFT percentiles, load per replica."""

from __future__ import annotations

import bisect
import math
import struct
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kvtier.stats import ranked_percentile

TIERS = ("l0", "l1", "l2_same", "l2_other")  # L2 split by who wrote the chunk: this replica or another


@dataclass(frozen=True)
class TierTokens:
    l0: int = 0
    l1: int = 0
    l2_same: int = 0
    l2_other: int = 0
    miss: int = 0

    @property
    def total(self) -> int:
        return self.l0 + self.l1 + self.l2_same + self.l2_other + self.miss

    @property
    def hit(self) -> int:
        return self.total - self.miss


@dataclass(frozen=True)
class ReplicaLoad:
    requests: int
    busy_s: float


@dataclass(frozen=True)
class SimResult:
    routing: str
    replicas: int
    slots: int
    seed: int
    qps_scale: float
    unit_tokens: int
    l0_tokens: int
    l1_tokens: int
    l2_tokens: int
    requests: int  # in the trace
    served: int
    skipped: int  # longer than max_model_len
    skipped_tokens: int  # prompt tokens the skipped requests held
    tokens: TierTokens
    ttft_s: dict[str, float]  # p50, p90, p99, mean, max
    per_replica: tuple[ReplicaLoad, ...]
    makespan_s: float  # first arrival to last prefill done
    l2_written_units: int = 0
    l2_deleted_units: int = 0
    l2_peak_units: int = 0  # L2 may exceed its budget between janitor sweeps
    extra: dict[str, Any] = field(default_factory=dict)  # labels the caller adds (e.g. the L2 size swept)
    # Tokens per tier for each LoRA adapter of the trace ("base": the base model); empty without adapters (issue 35).
    per_adapter: dict[str, TierTokens] = field(default_factory=dict)

    def adapter_hit_rates(self) -> dict[str, dict[str, float]]:
        """Per adapter: the share of its served prompt tokens each tier served, and all tiers together."""
        rates: dict[str, dict[str, float]] = {}
        for name, tokens in self.per_adapter.items():
            total = tokens.total
            rates[name] = {tier: getattr(tokens, tier) / total if total else 0.0 for tier in TIERS}
            rates[name]["total"] = tokens.hit / total if total else 0.0
        return rates

    def hit_rate(self, tier: str | None = None) -> float:
        """Fraction of served prompt tokens a tier served (None: all tiers together)."""
        total = self.tokens.total
        if not total:
            return 0.0
        hit = self.tokens.hit if tier is None else getattr(self.tokens, tier)
        return float(hit) / total

    @property
    def hit_rates(self) -> dict[str, float]:
        rates = {tier: self.hit_rate(tier) for tier in TIERS}
        rates["total"] = self.hit_rate()
        return rates

    @property
    def skipped_token_share(self) -> float:
        """Share of the trace's prompt tokens that skipped requests held."""
        total = self.tokens.total + self.skipped_tokens
        return self.skipped_tokens / total if total else 0.0

    @property
    def busiest_share(self) -> float:
        """Share of served requests the busiest replica served."""
        counts = [p.requests for p in self.per_replica]
        return max(counts) / sum(counts) if counts and sum(counts) else 0.0

    @property
    def balance(self) -> dict[str, float]:
        """max / mean over replicas (1.0 = perfectly even) of requests served and of busy time."""
        return {
            "requests": _imbalance([p.requests for p in self.per_replica]),
            "busy": _imbalance([p.busy_s for p in self.per_replica]),
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hit_rates"] = self.hit_rates
        if self.per_adapter:
            data["adapter_hit_rates"] = self.adapter_hit_rates()
        data["balance"] = self.balance
        data["skipped_token_share"] = self.skipped_token_share
        data["busiest_share"] = self.busiest_share
        return data


def summarize_ttft(values: Iterable[float]) -> dict[str, float]:
    """Percentiles (kvtier.stats' rule, numpy's linear one), mean and max; NaN when nothing was served."""
    sample = TtftSample()
    for value in values:
        sample.add(value)
    return sample.summary()


class TtftSample:
    """Every TTFT of a replay, for exact percentiles at 8 bytes a value (Python floats in a list cost 32): values go
    to a float array, sorted a block of BLOCK at a time as they come; a percentile is found by bisecting every block
    for the float whose rank it is (non-negative floats order as their bit patterns do), so the summary never builds
    a list of them all."""

    BLOCK = 1 << 16

    __slots__ = ("blocks", "count", "current", "flushed")

    def __init__(self) -> None:
        self.blocks: list[array[float]] = []  # sorted
        self.current: array[float] = array("d")  # in the order added
        self.count = 0  # values in `blocks`
        self.flushed = math.nan  # the value added last when `current` was last sorted into a block

    def add(self, value: float) -> None:
        current = self.current
        current.append(value)
        if len(current) >= self.BLOCK:
            self._flush()

    def _flush(self) -> None:
        current = self.current
        self.flushed = current[-1]
        self.blocks.append(array("d", sorted(current)))
        self.count += len(current)
        self.current = array("d")

    @property
    def last(self) -> float:
        """The latest value added (NaN before the first)."""
        return self.current[-1] if self.current else self.flushed

    def __len__(self) -> int:
        return self.count + len(self.current)

    def summary(self) -> dict[str, float]:
        if self.current:
            self._flush()
        blocks, count = self.blocks, self.count
        if not count:
            return dict.fromkeys(("p50", "p90", "p99", "mean", "max"), math.nan)
        if min(block[0] for block in blocks) < 0 or not all(map(math.isfinite, (block[-1] for block in blocks))):
            ordered = sorted(value for block in blocks for value in block)  # not a TTFT: the plain way
            blocks = [array("d", ordered)]

        def at(q: float) -> float:
            value = ranked_percentile(count, q, lambda rank: _ranked(blocks, rank))
            return math.nan if value is None else value

        return {
            "p50": at(50),
            "p90": at(90),
            "p99": at(99),
            "mean": math.fsum(math.fsum(block) for block in blocks) / count,
            "max": max(block[-1] for block in blocks),
        }


def _ranked(blocks: Sequence[array[float]], rank: int) -> float:
    """The value of 0-based `rank` among the sorted blocks' non-negative values: the smallest float (bisected by bit
    pattern) that at least rank + 1 values do not exceed."""
    low, high = 0, _bits(max(block[-1] for block in blocks))
    while low < high:
        middle = (low + high) // 2
        value = _float(middle)
        if sum(bisect.bisect_right(block, value) for block in blocks) > rank:
            high = middle
        else:
            low = middle + 1
    return _float(low)


def _bits(value: float) -> int:
    return int.from_bytes(struct.pack("<d", value), "little")


def _float(bits: int) -> float:
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def _imbalance(values: Sequence[float]) -> float:
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0
