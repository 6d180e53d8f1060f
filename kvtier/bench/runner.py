"""Run a workload end to end: probe the URLs, pick the model, scrape /metrics, send, scrape again, build the result."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kvtier.bench.client import Probe, probe
from kvtier.bench.metrics import cache_report, scrape_all
from kvtier.bench.prompts import PromptMaker
from kvtier.bench.records import Api
from kvtier.bench.result import BenchResult
from kvtier.bench.session import Session, Tracker, new_client
from kvtier.bench.workloads import Context, Workload
from kvtier.errors import UnavailableError, UsageError


@dataclass(frozen=True)
class RunOptions:
    api: Api
    model: str | None = None  # None: the first id of the first answering URL's /v1/models
    timeout_s: float = 60.0
    seed: int = 0
    salt: str = ""
    metrics_urls: tuple[str, ...] | None = None  # None: the workload's URLs; () scrapes nothing
    progress: bool = True
    probe_timeout_s: float = 5.0
    ignore_eos: bool = False
    label: str | None = None


def run_workload(workload: Workload, options: RunOptions) -> BenchResult:
    return asyncio.run(_run(workload, options))


async def _run(workload: Workload, options: RunOptions) -> BenchResult:
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    client = new_client(options.timeout_s)
    async with client:
        probes = await asyncio.gather(*(probe(client, u, timeout_s=options.probe_timeout_s) for u in workload.urls()))
        if not any(p.answered for p in probes):
            raise UnavailableError("no URL answers: " + "; ".join(f"{p.url} ({p.error})" for p in probes))
        model = options.model or _discover_model(probes)
        scraped = workload.urls() if options.metrics_urls is None else list(options.metrics_urls)
        before = await scrape_all(client, scraped, timeout_s=options.probe_timeout_s)
        ctx = Context(model, options.api, PromptMaker(options.seed, options.salt), ignore_eos=options.ignore_eos)
        with Tracker(options.progress, f"{workload.name} {options.salt}", workload.planned()) as tracker:
            session = Session(timeout_s=options.timeout_s, tracker=tracker, client=client)
            details = await workload.run(session, ctx)
        after = await scrape_all(client, scraped, timeout_s=options.probe_timeout_s)
    settings: dict[str, Any] = {
        **workload.settings(),
        "api": options.api,
        "model": model,
        "timeout_s": options.timeout_s,
        "seed": options.seed,
        "salt": options.salt,
        "ignore_eos": options.ignore_eos,
        "metrics_urls": scraped,
    }
    return BenchResult(
        workload=workload.name,
        started_at=started.isoformat(timespec="seconds"),
        duration_s=time.perf_counter() - t0,
        settings=settings,
        run_order=list(workload.runs),
        records=session.records,
        cache=[cache_report(b, a) for b, a in zip(before, after, strict=True)],
        details=details,
        probes=[_probe_json(p) for p in probes],
        label=options.label,
    )


def _discover_model(probes: list[Probe]) -> str:
    for p in probes:
        if p.models:
            return p.models[0]
    told = "; ".join(f"{p.url}: {p.error or 'no models listed'}" for p in probes)
    raise UsageError(f"cannot read the model name from GET /v1/models ({told}); pass --model")


def _probe_json(p: Probe) -> dict[str, Any]:
    return {"url": p.url, "answered": p.answered, "status": p.status, "models": list(p.models), "error": p.error}
