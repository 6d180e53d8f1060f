"""Percentiles and per-run summaries of request records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from kvtier.bench.records import RequestRecord
from kvtier.stats import percentile

PERCENTILES = (50, 90, 99)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99, mean, min and max of `values` (all None when there are none)."""
    out: dict[str, float | None] = {f"p{q}": percentile(values, q) for q in PERCENTILES}
    out["mean"] = sum(values) / len(values) if values else None
    out["min"] = min(values) if values else None
    out["max"] = max(values) if values else None
    return out


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Counts, latency distributions (ms) and throughput of one run's requests.

    Throughput divides by the run's span: first send to last completion, over every request of the run.
    """
    ok = [r for r in records if r.ok]
    starts = [r.start_ms for r in records]
    ends = [r.start_ms + r.e2e_ms for r in records if r.e2e_ms is not None]
    span_ms = (max(ends) - min(starts)) if ends and starts else 0.0
    span_s = span_ms / 1000
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    input_tokens = sum(r.prompt_tokens or 0 for r in ok)
    return {
        "requests": len(records),
        "ok": len(ok),
        "errors": len(records) - len(ok),
        "errors_by_kind": dict(sorted(Counter(r.error_kind or "unknown" for r in records if not r.ok).items())),
        "ttft_ms": distribution([r.ttft_ms for r in ok if r.ttft_ms is not None]),
        "itl_ms": distribution([gap for r in ok for gap in r.itl_ms]),
        "e2e_ms": distribution([r.e2e_ms for r in ok if r.e2e_ms is not None]),
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "cached_tokens": sum(r.cached_tokens or 0 for r in ok),
        "span_s": span_s,
        "request_throughput": len(ok) / span_s if span_s > 0 else None,
        "output_token_throughput": output_tokens / span_s if span_s > 0 else None,
        "input_token_throughput": input_tokens / span_s if span_s > 0 else None,
    }
