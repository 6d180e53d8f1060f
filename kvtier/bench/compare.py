"""`kvtier bench compare A.json B.json`: the same numbers from two result files, side by side, with differences."""

from __future__ import annotations

from typing import Any

from kvtier.bench.metrics import cache_totals
from kvtier.bench.result import BenchResult

# (label, path into a run summary); lower is better for latencies, higher for throughput.
RUN_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("requests", ("requests",)),
    ("ok", ("ok",)),
    ("errors", ("errors",)),
    ("TTFT p50 ms", ("ttft_ms", "p50")),
    ("TTFT p90 ms", ("ttft_ms", "p90")),
    ("TTFT p99 ms", ("ttft_ms", "p99")),
    ("ITL p50 ms", ("itl_ms", "p50")),
    ("E2E p50 ms", ("e2e_ms", "p50")),
    ("E2E p99 ms", ("e2e_ms", "p99")),
    ("req/s", ("request_throughput",)),
    ("output tok/s", ("output_token_throughput",)),
)


def _get(data: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = data
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def _row(section: str, metric: str, a: float | None, b: float | None) -> dict[str, Any]:
    delta = b - a if a is not None and b is not None else None
    ratio = b / a if a and b is not None else None
    return {"section": section, "metric": metric, "a": a, "b": b, "delta": delta, "ratio": ratio}


def compare(a: BenchResult, b: BenchResult) -> dict[str, Any]:
    sa, sb = a.summaries(), b.summaries()
    rows = []
    for run in [r for r in sa if r in sb]:
        rows += [_row(f"run {run}", label, _get(sa[run], path), _get(sb[run], path)) for label, path in RUN_METRICS]
    if a.workload == b.workload == "sweep":
        by_length = {r["length"]: r for r in b.details.get("sweep", [])}
        for ra in a.details.get("sweep", []):
            rb = by_length.get(ra["length"])
            if rb is not None:
                rows.append(
                    _row("sweep", f"length {ra['length']} cold TTFT ms", ra["cold_ttft_ms"], rb["cold_ttft_ms"])
                )
                rows.append(
                    _row("sweep", f"length {ra['length']} reused TTFT ms", ra["reused_ttft_ms"], rb["reused_ttft_ms"])
                )
                rows.append(_row("sweep", f"length {ra['length']} speedup", ra["speedup"], rb["speedup"]))
    ta, tb = cache_totals(a.cache), cache_totals(b.cache)
    for tier in [t for t in ta if t in tb and t != "l2_io"]:
        rows.append(_row("cache", f"{tier} hit tokens", ta[tier]["hit_tokens"], tb[tier]["hit_tokens"]))
        rows.append(_row("cache", f"{tier} hit rate", _rate(ta[tier]), _rate(tb[tier])))
    for key in sorted(set(ta.get("l2_io", {})) & set(tb.get("l2_io", {}))):
        rows.append(_row("cache", f"L2 {key.replace('_', ' ')}", ta["l2_io"][key], tb["l2_io"][key]))
    return {
        "a": _describe(a),
        "b": _describe(b),
        "only_in_a": [r for r in sa if r not in sb],
        "only_in_b": [r for r in sb if r not in sa],
        "rows": rows,
    }


def _rate(tier: dict[str, float]) -> float | None:
    return tier["hit_tokens"] / tier["query_tokens"] if tier["query_tokens"] else None


def _describe(result: BenchResult) -> dict[str, Any]:
    return {
        "workload": result.workload,
        "label": result.label,
        "started_at": result.started_at,
        "salt": result.settings.get("salt"),
    }
