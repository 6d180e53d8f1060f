"""Which replica served each request, from the router's own counter (`--router-metrics-url`).

vllm-router counts the requests each replica served (ROUTER_SERVED_METRIC, label `worker`) on its Prometheus port
and sets no response header that names it. So a request's replica is known when it ran alone: the counter is read
before and after it, and exactly one worker moved by exactly one. A request that overlapped another (concurrency
above 1, or arrivals closer than a request's duration) keeps `replica` None: the counter cannot tell them apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import aiohttp

from kvtier.bench.http import TRANSPORT_ERRORS, describe, get
from kvtier.bench.metrics import parse_prometheus
from kvtier.bench.records import RequestRecord
from kvtier.bench.result import BenchResult
from kvtier.serving import ROUTER_SERVED_METRIC, ROUTER_WORKER_LABEL


async def served_counts(client: aiohttp.ClientSession, url: str, *, timeout_s: float) -> dict[str, float] | str:
    """The router's per-replica counter, or why its metrics cannot be read (a short error: then no replica is told)."""
    try:
        answer = await get(client, f"{url.rstrip('/')}/metrics", timeout_s=timeout_s)
    except TRANSPORT_ERRORS as err:
        return describe(err)
    if answer.status != 200:
        return f"HTTP {answer.status}"
    counts: dict[str, float] = {}
    for sample in parse_prometheus(answer.text):
        if sample.name == ROUTER_SERVED_METRIC:
            worker = dict(sample.labels).get(ROUTER_WORKER_LABEL)
            if worker is not None:
                counts[worker] = counts.get(worker, 0.0) + sample.value
    return counts


def single_mover(before: dict[str, float] | None, after: dict[str, float] | None) -> str | None:
    """The one worker whose count went up by exactly one, else None."""
    if before is None or after is None:
        return None
    moved = {w: n - before.get(w, 0.0) for w, n in after.items() if n != before.get(w, 0.0)}
    if len(moved) == 1:
        ((worker, delta),) = moved.items()
        return worker if delta == 1 else None
    return None


def unread_note(result: BenchResult) -> str | None:
    """Said instead of "overlapped" when the run's router counter was never read (so no request's replica could be
    told); None when it was read."""
    error = result.details.get("router_metrics_error")
    if not isinstance(error, str):
        return None
    url = str(result.settings["router_metrics_url"]).rstrip("/")
    return (
        f"router metrics could not be read at {url}/metrics ({error}), so no request's replica is known; "
        "pass the router's Prometheus port as --router-metrics-url"
    )


def replica_summary(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """Requests per replica among those whose replica is known, and how many could not be told."""
    records = list(records)
    known = Counter(r.replica for r in records if r.replica is not None)
    return {"per_replica": dict(sorted(known.items())), "unknown": sum(1 for r in records if r.replica is None)}
