"""Percentiles, goodput and per-run summaries of request records.

Definitions follow `vllm bench serve` (docs/references.md, "Benchmark metrics and arrivals"): TTFT is send to the
first generated text; ITL the gaps between chunks carrying text; TPOT a request's decode time over its tokens after
the first (requests with one token have none, and count as TPOT 0 for goodput); goodput the requests that met every
SLO, per second.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvtier.bench.records import RequestRecord
from kvtier.stats import percentile

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
SLO_METRICS = ("ttft", "tpot", "e2e")  # what --slo may bound, in ms


def percentile_key(q: float) -> str:
    """`p50`, `p99`, `p99.9`: the key of a percentile in a distribution."""
    return f"p{q:g}"


def distribution(values: Sequence[float], percentiles: Sequence[float] = PERCENTILES) -> dict[str, float | None]:
    """The chosen percentiles, mean, min and max of `values` (all None when there are none)."""
    out: dict[str, float | None] = {percentile_key(q): percentile(values, q) for q in percentiles}
    out["mean"] = sum(values) / len(values) if values else None
    out["min"] = min(values) if values else None
    out["max"] = max(values) if values else None
    return out


def meets_slo(record: RequestRecord, slo: Mapping[str, float]) -> bool:
    """A request is good when it succeeded and each bounded metric is at or under its bound (ms)."""
    if not record.ok:
        return False
    measured = {"ttft": record.ttft_ms, "tpot": record.tpot_ms or 0.0, "e2e": record.e2e_ms}
    return all((value := measured[name]) is not None and value <= bound for name, bound in slo.items())


def busy_seconds(records: Iterable[RequestRecord]) -> float:
    """Time with at least one request in flight: the union of [start, end) of every request, in seconds."""
    spans = sorted((r.start_ms, r.start_ms + r.e2e_ms) for r in records if r.e2e_ms is not None)
    total, end = 0.0, -math.inf
    for start, stop in spans:
        if start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total / 1000


def summarize(
    records: Sequence[RequestRecord],
    *,
    percentiles: Sequence[float] = PERCENTILES,
    slo: Mapping[str, float] | None = None,
    busy: bool = False,
) -> dict[str, Any]:
    """Counts, latency distributions (ms), throughput and goodput of one run's requests.

    Throughput divides by the run's span (first send to last completion), or with `busy` by the time a request
    was in flight, so pauses a workload makes on purpose (the sweep's settle time) are not counted as idle server.
    """
    ok = [r for r in records if r.ok]
    starts = [r.start_ms for r in records]
    ends = [r.start_ms + r.e2e_ms for r in records if r.e2e_ms is not None]
    span_s = (max(ends) - min(starts)) / 1000 if ends and starts else 0.0
    busy_s = busy_seconds(records)
    seconds = busy_s if busy else span_s
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    input_tokens = sum(r.prompt_tokens or 0 for r in ok)

    def dist(values: Iterable[float | None]) -> dict[str, float | None]:
        return distribution([v for v in values if v is not None], percentiles)

    out: dict[str, Any] = {
        "requests": len(records),
        "ok": len(ok),
        "errors": len(records) - len(ok),
        "errors_by_kind": dict(sorted(Counter(r.error_kind or "unknown" for r in records if not r.ok).items())),
        "ttft_ms": dist(r.ttft_ms for r in ok),
        "tpot_ms": dist(r.tpot_ms for r in ok),
        "itl_ms": dist(gap for r in ok for gap in r.itl_ms),
        "e2e_ms": dist(r.e2e_ms for r in ok),
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "cached_tokens": sum(r.cached_tokens or 0 for r in ok),
        "span_s": span_s,
        "busy_s": busy_s,
        "throughput_over": "busy" if busy else "span",
        "request_throughput": len(ok) / seconds if seconds > 0 else None,
        "output_token_throughput": output_tokens / seconds if seconds > 0 else None,
        "input_token_throughput": input_tokens / seconds if seconds > 0 else None,
    }
    if slo:
        good = sum(1 for r in records if meets_slo(r, slo))
        out["goodput"] = {
            "slo_ms": dict(slo),
            "good": good,
            "good_fraction": good / len(records) if records else None,
            "request_goodput": good / seconds if seconds > 0 else None,
        }
    return out


def parse_percentiles(text: str) -> tuple[float, ...]:
    """`50,90,99,99.9` -> (50.0, 90.0, 99.0, 99.9); ValueError naming the bad item."""
    items = [v for v in text.replace(" ", "").split(",") if v]
    if not items:
        raise ValueError("give at least one percentile, like 50,90,99")
    out = []
    for item in items:
        try:
            q = float(item)
        except ValueError:
            raise ValueError(f"'{item}' is not a number; write percentiles like 50,90,99,99.9") from None
        if not 0 < q < 100:
            raise ValueError(f"{item} is not between 0 and 100 (exclusive); write percentiles like 50,90,99,99.9")
        out.append(q)
    if len(set(out)) != len(out):
        raise ValueError(f"'{text}' repeats a percentile")
    return tuple(sorted(out))


def parse_slo(text: str) -> dict[str, float]:
    """`ttft=500ms,tpot=50ms,e2e=2s` -> bounds in ms; ValueError naming the bad item."""
    example = "write it like ttft=500ms,tpot=50ms (metrics: ttft, tpot, e2e; units ms or s)"
    out: dict[str, float] = {}
    for item in [v for v in text.replace(" ", "").split(",") if v]:
        name, sep, value = item.partition("=")
        if not sep or name not in SLO_METRICS:
            raise ValueError(f"'{item}' is not an SLO; {example}")
        scale = 1000.0 if value.endswith("s") and not value.endswith("ms") else 1.0
        number = value.removesuffix("ms").removesuffix("s")
        try:
            bound = float(number) * scale
        except ValueError:
            raise ValueError(f"'{item}' has no number of ms; {example}") from None
        if not 0 < bound < math.inf:
            raise ValueError(f"'{item}' must be a finite time above 0; {example}")
        if name in out:
            raise ValueError(f"'{text}' bounds {name} twice")
        out[name] = bound
    if not out:
        raise ValueError(f"no SLO given; {example}")
    return out
