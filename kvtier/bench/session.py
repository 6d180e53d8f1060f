"""A benchmark session: one HTTP client, one time origin, a live progress bar, and every record in send order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import replace
from types import TracebackType

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from kvtier.bench.client import send
from kvtier.bench.records import Request, RequestRecord
from kvtier.bench.replicas import served_counts, single_mover

PLAIN_EVERY_S = 5.0  # off a terminal (a CI log, a pipe): one progress line at most this often


class Tracker:
    """The live progress bar on stderr: requests done, and how many failed. Off a terminal, where a bar cannot
    redraw, a plain line every PLAIN_EVERY_S seconds instead, so a long run never looks hung (--no-progress: none)."""

    def __init__(
        self, enabled: bool, description: str, total: int | None = None, console: Console | None = None
    ) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            disable=not (enabled and self.console.is_terminal),
        )
        self.task: TaskID = self.progress.add_task(description, total=total, status="")
        self.ok = 0
        self.failed = 0
        self.description = description
        self.total = total
        self.plain = enabled and not self.console.is_terminal
        self.started = self.last_line = time.monotonic()

    def __enter__(self) -> Tracker:
        self.progress.start()
        if self.plain:
            planned = f"{self.total} requests" if self.total else "requests"
            self.console.print(f"{self.description}: sending {planned} ...", markup=False, highlight=False)
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def done(self, record: RequestRecord) -> None:
        if record.ok:
            self.ok += 1
        else:
            self.failed += 1
        status = f"ok {self.ok}" + (f" [red]errors {self.failed}[/red]" if self.failed else "")
        self.progress.update(self.task, advance=1, status=status)
        now = time.monotonic()
        if self.plain and now - self.last_line >= PLAIN_EVERY_S:
            self.last_line = now
            done = self.ok + self.failed
            of = f" of {self.total}" if self.total else ""
            errors = f", {self.failed} failed" if self.failed else ""
            self.console.print(
                f"{self.description}: {done}{of} requests done{errors} ({now - self.started:.0f} s)",
                markup=False,
                highlight=False,
            )


class Session:
    def __init__(
        self,
        *,
        timeout_s: float,
        tracker: Tracker,
        client: httpx.AsyncClient | None = None,
        router_metrics_url: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.tracker = tracker
        self.client = client or new_client(timeout_s)
        self.origin = time.perf_counter()
        self.records: list[RequestRecord] = []
        self.sent = 0  # requests sent, finished or not (an interrupted run drops those in flight)
        self.router_metrics_url = router_metrics_url  # the router's Prometheus port: which replica served (replicas.py)
        self.in_flight = 0
        self.started = 0  # requests started so far: one that started while another ran spoils both attributions

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.aclose()

    def now_ms(self) -> float:
        return (time.perf_counter() - self.origin) * 1000

    async def one(self, req: Request) -> RequestRecord:
        self.sent += 1
        alone = self.router_metrics_url is not None and self.in_flight == 0
        self.in_flight += 1
        self.started += 1
        mine = self.started
        try:
            before = await self._served() if alone else None
            record = await send(self.client, req, timeout_s=self.timeout_s, origin=self.origin)
        finally:
            self.in_flight -= 1
        if alone and self.started == mine:  # nothing else started while it ran
            record.replica = single_mover(before, await self._served())
        self.records.append(record)
        self.tracker.done(record)
        return record

    async def _served(self) -> dict[str, float] | None:
        assert self.router_metrics_url is not None
        return await served_counts(self.client, self.router_metrics_url, timeout_s=min(self.timeout_s, 5.0))

    async def unrecorded(self, req: Request) -> RequestRecord:
        """Send a request that is not part of any run (a warm-up): measured, but not in `records`."""
        return await send(self.client, req, timeout_s=self.timeout_s, origin=self.origin)

    async def schedule(self, reqs: Iterable[Request], *, concurrency: int | None) -> list[RequestRecord]:
        """Send each request at its `scheduled_ms` (from now), at most `concurrency` in flight (None: no limit).

        A request held back by the limit is sent late; its record keeps both times. Cancelled (an interrupt), it cancels every request it started.
        """
        limit = asyncio.Semaphore(concurrency) if concurrency else None
        base = self.now_ms()

        async def go(req: Request) -> RequestRecord:
            if limit is None:
                return await self.one(req)
            async with limit:
                return await self.one(req)

        tasks: list[asyncio.Task[RequestRecord]] = []
        try:
            for req in reqs:
                at = base + (req.scheduled_ms or 0.0)
                wait_ms = at - self.now_ms()
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000)
                tasks.append(asyncio.create_task(go(replace(req, scheduled_ms=at))))
            return list(await asyncio.gather(*tasks))
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


def new_client(timeout_s: float) -> httpx.AsyncClient:
    # trust_env=False: proxies from the environment must not reroute a benchmark (or a local test) elsewhere.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
        trust_env=False,
    )
