"""Run a workload end to end: probe the URLs, pick the model, scrape /metrics, send, scrape again, build the result.

SIGINT and SIGTERM stop the sending, not the run: requests in flight are dropped, /metrics is scraped once more,
and the result of what finished comes back marked partial (the CLI writes it and exits 130). A second signal
acts as usual (the handlers are removed after the first).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kvtier.bench.client import Probe, probe
from kvtier.bench.http import new_client
from kvtier.bench.metrics import cache_report, note_unseen, scrape_all
from kvtier.bench.prompts import PromptMaker
from kvtier.bench.records import Api
from kvtier.bench.result import BenchResult
from kvtier.bench.session import Session, Tracker
from kvtier.bench.stats import PERCENTILES, distribution
from kvtier.bench.workloads import Context, Workload
from kvtier.errors import UnavailableError, UsageError

_FINAL_SCRAPE_S = 2.0  # after an interrupt: a quick last look at /metrics, not a long wait


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
    percentiles: tuple[float, ...] = PERCENTILES
    slo_ms: dict[str, float] | None = None  # goodput bounds: ttft, tpot, e2e
    router_metrics_url: str | None = None  # the router's Prometheus port: record which replica served each request


def run_workload(workload: Workload, options: RunOptions) -> BenchResult:
    return asyncio.run(_run(workload, options))


class _Interrupt:
    def __init__(self) -> None:
        self.signal: str | None = None


@contextmanager
def _stop_on_signals(task: asyncio.Task[None], interrupt: _Interrupt) -> Iterator[None]:
    """While the block runs, SIGINT/SIGTERM cancel `task` once (then the default handlers are back)."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)

    def stop(sig: signal.Signals) -> None:
        interrupt.signal = sig.name
        for s in signals:
            loop.remove_signal_handler(s)
        task.cancel()

    installed = []
    for sig in signals:
        try:
            loop.add_signal_handler(sig, stop, sig)
            installed.append(sig)
        except (RuntimeError, ValueError, NotImplementedError):
            pass  # not the main thread (a test's helper thread) or no signal support: Ctrl-C raises as usual
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _run(workload: Workload, options: RunOptions) -> BenchResult:
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    client = new_client(options.timeout_s)
    interrupt = _Interrupt()
    async with client:
        probes = await asyncio.gather(*(probe(client, u, timeout_s=options.probe_timeout_s) for u in workload.urls()))
        if not any(p.answered for p in probes):
            raise UnavailableError("no URL answers: " + "; ".join(f"{p.url} ({p.error})" for p in probes))
        model = options.model or _discover_model(probes)
        scraped = workload.urls() if options.metrics_urls is None else list(options.metrics_urls)
        before = await scrape_all(client, scraped, timeout_s=options.probe_timeout_s)
        maker = PromptMaker(options.seed, options.salt)
        ctx = Context(model, options.api, maker, ignore_eos=options.ignore_eos, percentiles=options.percentiles)
        with Tracker(options.progress, f"{workload.name} {options.salt}", workload.planned()) as tracker:
            session = Session(
                timeout_s=options.timeout_s,
                tracker=tracker,
                client=client,
                router_metrics_url=options.router_metrics_url,
            )
            work = asyncio.create_task(workload.run(session, ctx))
            with _stop_on_signals(work, interrupt):
                try:
                    await work
                except asyncio.CancelledError:
                    if interrupt.signal is None:
                        raise  # cancelled from outside, not by a signal of ours
        final_timeout = _FINAL_SCRAPE_S if interrupt.signal else options.probe_timeout_s
        after = await scrape_all(client, scraped, timeout_s=final_timeout)
    settings: dict[str, Any] = {
        **workload.settings(),
        "api": options.api,
        "model": model,
        "timeout_s": options.timeout_s,
        "seed": options.seed,
        "salt": options.salt,
        "ignore_eos": options.ignore_eos,
        "metrics_urls": scraped,
        "percentiles": list(options.percentiles),
        "slo_ms": options.slo_ms,
        "router_metrics_url": options.router_metrics_url,
        "group_by": workload.group_by,
        "throughput_over": "busy" if workload.busy_time else "span",
    }
    cache = [cache_report(b, a) for b, a in zip(before, after, strict=True)]
    note_unseen(cache, sum(1 for r in session.records if r.ok))
    interrupted = None
    if interrupt.signal is not None:
        interrupted = {"signal": interrupt.signal, "dropped_in_flight": session.sent - len(session.records)}
    return BenchResult(
        workload=workload.name,
        started_at=started.isoformat(timespec="seconds"),
        duration_s=time.perf_counter() - t0,
        settings=settings,
        run_order=list(workload.runs),
        records=session.records,
        cache=cache,
        details=_with_client_lag(workload.details(session.records, ctx), session, options.percentiles),
        probes=[_probe_json(p) for p in probes],
        label=options.label,
        interrupted=interrupted,
    )


def _with_client_lag(details: dict[str, Any], session: Session, percentiles: tuple[float, ...]) -> dict[str, Any]:
    """The workload's details plus how late the client's event loop ran while it sent on a schedule, and why the
    router's metrics could not be read (with --router-metrics-url)."""
    if session.router_metrics_error is not None:
        details = {**details, "router_metrics_error": session.router_metrics_error}
    if not session.loop_lag_ms:
        return details
    return {**details, "client_loop_lag_ms": distribution(session.loop_lag_ms, percentiles)}


def _discover_model(probes: list[Probe]) -> str:
    for p in probes:
        if p.models:
            return p.models[0]
    answered = [p for p in probes if p.answered]
    if any(p.error is None for p in answered):  # an OpenAI-style model list, but an empty one
        listed = ", ".join(p.url for p in answered if p.error is None)
        raise UsageError(f"GET /v1/models at {listed} lists no model; pass the served model's name with --model")
    told = "; ".join(f"{p.url}/v1/models answered {p.error}" for p in answered)
    raise UsageError(
        f"not an OpenAI-compatible server: {told}; point the URL at vLLM or its router (the port of its OpenAI "
        "API, /v1/completions), not at another service"
    )


def _probe_json(p: Probe) -> dict[str, Any]:
    return {"url": p.url, "answered": p.answered, "status": p.status, "models": list(p.models), "error": p.error}
