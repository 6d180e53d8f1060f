"""A benchmark session: one HTTP client, one time origin, a live progress bar, and every record in send order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import replace
from types import TracebackType

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from kvtier.bench.client import send
from kvtier.bench.http import new_client
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


# How often the session samples its event loop's lag while it sends on a schedule: a loop that wakes late is a client
# too busy to send on time or to read chunks when they arrive, and every TTFT it measures includes that delay.
LAG_SAMPLE_S = 0.05


class Session:
    def __init__(
        self,
        *,
        timeout_s: float,
        tracker: Tracker,
        client: aiohttp.ClientSession | None = None,
        router_metrics_url: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.tracker = tracker
        self.client = client if client is not None else new_client(timeout_s)
        self.origin = time.perf_counter()
        self.records: list[RequestRecord] = []
        self.sent = 0  # requests sent, finished or not (an interrupted run drops those in flight)
        self.router_metrics_url = router_metrics_url  # the router's Prometheus port: which replica served (replicas.py)
        self.router_metrics_error: str | None = None  # why the router's counter could not be read (first failure)
        self.in_flight = 0
        self.started = 0  # requests started so far: one that started while another ran spoils both attributions
        self.loop_lag_ms: list[float] = []  # how late the event loop woke, sampled while a schedule ran

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.client.close()

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
        counts = await served_counts(self.client, self.router_metrics_url, timeout_s=min(self.timeout_s, 5.0))
        if isinstance(counts, str):
            # Kept so the summary says the URL is unreadable, not that requests overlapped (issue 39).
            self.router_metrics_error = self.router_metrics_error or counts
            return None
        return counts

    async def unrecorded(self, req: Request) -> RequestRecord:
        """Send a request that is not part of any run (a warm-up): measured, but not in `records`."""
        return await send(self.client, req, timeout_s=self.timeout_s, origin=self.origin)

    async def schedule(self, reqs: Iterable[Request], *, concurrency: int | None) -> list[RequestRecord]:
        """Send each request at its `scheduled_ms` (from now), at most `concurrency` in flight (None: no limit).

        `reqs` is read one request at a time, and with a limit only once a slot is free, so a lazy iterable keeps at
        most `concurrency` + 1 request bodies alive whatever the schedule's length. A request held back by the
        limit is sent late; its record keeps both times. Cancelled (an interrupt), it cancels every request it
        started.
        """
        limit = asyncio.Semaphore(concurrency) if concurrency else None
        base = self.now_ms()

        async def go(req: Request) -> RequestRecord:
            try:
                return await self.one(req)
            finally:
                if limit is not None:
                    limit.release()

        tasks: list[asyncio.Task[RequestRecord]] = []
        monitor = asyncio.create_task(self._sample_lag())
        try:
            for req in reqs:
                at = base + (req.scheduled_ms or 0.0)
                wait_ms = at - self.now_ms()
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000)
                if limit is not None:
                    await limit.acquire()
                tasks.append(asyncio.create_task(go(replace(req, scheduled_ms=at))))
            return list(await asyncio.gather(*tasks))
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            monitor.cancel()
            await asyncio.gather(monitor, return_exceptions=True)

    async def _sample_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + LAG_SAMPLE_S
            await asyncio.sleep(LAG_SAMPLE_S)
            self.loop_lag_ms.append(max(loop.time() - asked, 0.0) * 1000)
