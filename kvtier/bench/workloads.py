"""The four workloads. Each sends its requests through a Session; its table is built from the records afterwards,
so an interrupted run still gets the table of what finished.

- sweep: a warm-up per URL, then per repeat (fresh salt) and prompt length: cold on the write URL, then the same
  bytes on the read URL (cross-pod reuse). Per length: the median and spread over repeats.
- multiturn: conversations whose history accumulates turn by turn on the write URL; once a conversation has finished
  all its turns, the read URL gets it once, as one full history it has never seen (so the read measures L2 alone).
- shared-prefix: many users sharing one system prompt, at a target rate (fixed, Poisson or gamma) and concurrency.
- trace: a Mooncake trace replayed by timestamp (time-scaled) or at a rate; equal hash ids, equal text.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kvtier.bench.arrivals import Arrival, send_offsets_ms
from kvtier.bench.prompts import PromptMaker
from kvtier.bench.records import Api, Request, RequestRecord, request_body
from kvtier.bench.session import Session
from kvtier.bench.stats import PERCENTILES, distribution
from kvtier.bench.trace import trace_prompt
from kvtier.serving import SESSION_HEADER
from kvtier.trace import MOONCAKE_BLOCK_TOKENS, TraceError, TraceRequest

# The longest wait between two sends of a trace replay (after --time-scale): an hour, past any quiet spell of the
# public traces (one hour each); a later timestamp is a typo that would otherwise sleep for it.
MAX_SEND_GAP_S = 3600.0


@dataclass(frozen=True)
class Context:
    model: str
    api: Api
    maker: PromptMaker
    ignore_eos: bool = False
    percentiles: tuple[float, ...] = PERCENTILES

    def body(self, text: str | list[dict[str, str]], max_tokens: int) -> bytes:
        return request_body(self.api, self.model, text, max_tokens, ignore_eos=self.ignore_eos)

    def request_id(self, run: str, index: int) -> dict[str, str]:
        return {"x-request-id": f"kvtier-bench-{self.maker.salt}-{run}-{index}"}


class Workload(ABC):
    name: ClassVar[str]
    runs: ClassVar[tuple[str, ...]]  # run names in report order
    group_by: ClassVar[str | None] = None  # a tag whose values get their own percentiles (sweep: length)
    busy_time: ClassVar[bool] = False  # throughput over time with requests in flight (pauses are deliberate)

    @abstractmethod
    def urls(self) -> list[str]:
        """Every URL the workload sends to (the ones probed and scraped)."""

    @abstractmethod
    def planned(self) -> int | None:
        """How many requests it will send (for the progress bar; None when a duration decides)."""

    @abstractmethod
    async def run(self, session: Session, ctx: Context) -> None:
        """Send everything (cancelled on an interrupt: what finished is in session.records)."""

    @abstractmethod
    def details(self, records: Sequence[RequestRecord], ctx: Context) -> dict[str, Any]:
        """The workload's own table for the result file, from the records that finished."""

    def settings(self) -> dict[str, Any]:
        skip = {"requests", "warmups"}
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items() if k not in skip}


def _dedupe(urls: list[str | None]) -> list[str]:
    return list(dict.fromkeys(u for u in urls if u))


def _ttfts(records: Sequence[RequestRecord]) -> list[float]:
    return [r.ttft_ms for r in records if r.ok and r.ttft_ms is not None]


def _first_error(records: Sequence[RequestRecord]) -> str | None:
    failed = next((r for r in records if not r.ok), None)
    return f"{failed.error_kind}: {failed.error}" if failed is not None else None


@dataclass(frozen=True)
class Sweep(Workload):
    name: ClassVar[str] = "sweep"
    runs: ClassVar[tuple[str, ...]] = ("cold", "reused", "local")
    group_by: ClassVar[str | None] = "length"
    busy_time: ClassVar[bool] = True
    write_url: str
    read_url: str
    lengths: tuple[int, ...]
    max_tokens: int = 4
    settle_s: float = 1.0  # LMCache stores to L2 asynchronously: give the write a moment before the read
    local_repeat: bool = False  # also repeat on the write URL (its L0 hit), run "local"
    repeat: int = 1  # every length this many times, each with a fresh salt (a new, cold prompt)
    warmup: bool = True  # one short request per URL first: connections, CUDA graphs, first-request costs
    warmups: list[dict[str, Any]] = field(default_factory=list, compare=False, repr=False)

    def urls(self) -> list[str]:
        return _dedupe([self.write_url, self.read_url])

    def planned(self) -> int:
        return len(self.lengths) * self.repeat * (3 if self.local_repeat else 2)

    def salt(self, ctx: Context, repeat: int) -> str:
        """Repeat 1 uses the run's salt (so --salt repeats it exactly); later repeats a salt derived from it."""
        return ctx.maker.salt if repeat == 1 else f"{ctx.maker.salt}-r{repeat}"

    async def run(self, session: Session, ctx: Context) -> None:
        if self.warmup:
            await self._warm_up(session, ctx)
        for k in range(1, self.repeat + 1):
            maker = PromptMaker(ctx.maker.seed, self.salt(ctx, k))
            for i, length in enumerate(self.lengths):
                index = (k - 1) * len(self.lengths) + i
                tags = {"length": length, "repeat": k}
                body = ctx.body(maker.sweep_prompt(length), self.max_tokens)
                await session.one(
                    Request("cold", self.write_url, ctx.api, body, index, tags, ctx.request_id("cold", index))
                )
                if self.settle_s > 0:
                    await asyncio.sleep(self.settle_s)
                reused = Request("reused", self.read_url, ctx.api, body, index, tags, ctx.request_id("reused", index))
                await session.one(reused)
                if self.local_repeat:
                    local = Request("local", self.write_url, ctx.api, body, index, tags, ctx.request_id("local", index))
                    await session.one(local)

    async def _warm_up(self, session: Session, ctx: Context) -> None:
        """A short prompt that shares no prefix with the sweep's, once per URL; outcome kept, not in any run."""
        for n, url in enumerate(self.urls()):
            text = " ".join(ctx.maker.header(f"warm-up {n}") + ctx.maker.words(f"warmup:{n}", 32))
            req = Request("warmup", url, ctx.api, ctx.body(text, 1), n, {}, ctx.request_id("warmup", n))
            rec = await session.unrecorded(req)
            self.warmups.append({"url": url, "ok": rec.ok, "ttft_ms": rec.ttft_ms, "error": rec.error})

    def details(self, records: Sequence[RequestRecord], ctx: Context) -> dict[str, Any]:  # noqa: ARG002
        found = [_sweep_row(n, [r for r in records if r.tags.get("length") == n]) for n in self.lengths]
        rows = [row for row in found if row is not None]
        return {
            "sweep": rows,
            "same_url": self.write_url == self.read_url,
            "repeat": self.repeat,
            "warmup": list(self.warmups),
            "failed_lengths": [row["length"] for row in rows if row["status"] != "ok"],
        }


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"min": min(values) if values else None, "max": max(values) if values else None}


def _sweep_row(length: int, records: list[RequestRecord]) -> dict[str, Any] | None:
    """Median and spread over repeats of one length; a side that never succeeded is a failure, never 0 ms."""
    if not records:
        return None
    by_run = {run: [r for r in records if r.run == run] for run in ("cold", "reused", "local")}
    cold, reused, local = (_ttfts(by_run[run]) for run in ("cold", "reused", "local"))
    pairs: dict[int, dict[str, float]] = {}
    for r in by_run["cold"] + by_run["reused"]:
        if r.ok and r.ttft_ms is not None:
            pairs.setdefault(r.tags.get("repeat", 1), {})[r.run] = r.ttft_ms
    speedups = [p["cold"] / p["reused"] for p in pairs.values() if "cold" in p and p.get("reused")]
    if not cold:
        status = "cold failed"
    elif by_run["reused"] and not reused:
        status = "read failed"
    elif not by_run["reused"]:
        status = "not read"  # interrupted between the write and the read
    elif len(speedups) < len(pairs) or any(not r.ok for r in records):
        status = "partly failed"
    else:
        status = "ok"
    prompt_tokens = next((r.prompt_tokens for r in records if r.prompt_tokens is not None), None)
    return {
        "length": length,
        "prompt_tokens": prompt_tokens,
        "repeats": len(by_run["cold"]),
        "status": status,
        "cold_ttft_ms": statistics.median(cold) if cold else None,
        "reused_ttft_ms": statistics.median(reused) if reused else None,
        "local_ttft_ms": statistics.median(local) if local else None,
        "speedup": statistics.median(speedups) if speedups else None,
        "cold_ttft_spread_ms": _spread(cold),
        "reused_ttft_spread_ms": _spread(reused),
        "speedup_spread": _spread(speedups),
        "cold_cached_tokens": next((r.cached_tokens for r in by_run["cold"] if r.ok), None),
        "reused_cached_tokens": next((r.cached_tokens for r in by_run["reused"] if r.ok), None),
        "cold_error": _first_error(by_run["cold"]),
        "reused_error": _first_error(by_run["reused"]),
    }


@dataclass(frozen=True)
class MultiTurn(Workload):
    name: ClassVar[str] = "multiturn"
    runs: ClassVar[tuple[str, ...]] = ("write", "read")
    busy_time: ClassVar[bool] = True
    write_url: str
    read_url: str | None
    conversations: int = 5
    turns: int = 5
    system_tokens: int = 500
    turn_tokens: int = 200
    max_tokens: int = 32
    settle_s: float = 1.0
    concurrency: int | None = None  # conversations in flight at once (None: all)

    def urls(self) -> list[str]:
        return _dedupe([self.write_url, self.read_url])

    def planned(self) -> int:
        return self.conversations * self.turns + (self.conversations if self.read_url else 0)

    def read_turn(self, conversation: int) -> int:
        """The turn whose full history the read URL gets: the last for conversation 0, then one earlier per
        conversation, cycling, so that with as many conversations as turns every history length is read once."""
        return self.turns - conversation % self.turns

    async def run(self, session: Session, ctx: Context) -> None:
        limit = asyncio.Semaphore(self.concurrency or self.conversations)

        async def conversation(c: int) -> None:
            async with limit:
                sent = await self._converse(session, ctx, c)
                if self.read_url is None or len(sent) < self.turns:
                    return
                if self.settle_s > 0:
                    await asyncio.sleep(self.settle_s)
                # Sent only now that the write URL has finished every turn: the read URL has never seen this
                # conversation, so nothing of it is in its own GPU or CPU cache; whatever it reuses comes from L2.
                req = sent[self.read_turn(c) - 1]
                await session.one(req.with_url(self.read_url, "read", ctx.request_id("read", req.index)))

        await asyncio.gather(*(conversation(c) for c in range(self.conversations)))

    async def _converse(self, session: Session, ctx: Context, c: int) -> list[Request]:
        head = ctx.maker.header(f"conversation {c}")
        system = " ".join(head + ctx.maker.words(f"conv:{c}:system", self.system_tokens - len(head)))
        messages = [{"role": "system", "content": system}]
        sent: list[Request] = []
        for t in range(self.turns):
            messages.append(
                {"role": "user", "content": " ".join(ctx.maker.words(f"conv:{c}:turn:{t}", self.turn_tokens))}
            )
            index = c * self.turns + t
            req = Request(
                "write",
                self.write_url,
                ctx.api,
                ctx.body(list(messages), self.max_tokens),
                index,
                {"conversation": c, "turn": t + 1},
                ctx.request_id("write", index),
            )
            record = await session.one(req)
            if not record.ok:
                return sent  # a history with a failed answer in it is not worth continuing or reading
            messages.append({"role": "assistant", "content": record.output_text})
            sent.append(req)
        return sent

    def details(self, records: Sequence[RequestRecord], ctx: Context) -> dict[str, Any]:
        rows = []
        for turn in range(1, self.turns + 1):
            at_turn = [r for r in records if r.tags.get("turn") == turn]
            write = [r for r in at_turn if r.run == "write"]
            read = [r for r in at_turn if r.run == "read"]
            tokens = [r.prompt_tokens for r in write if r.prompt_tokens is not None]
            rows.append(
                {
                    "turn": turn,
                    "prompt_tokens_mean": sum(tokens) / len(tokens) if tokens else None,
                    "write_ttft_ms": distribution(_ttfts(write), ctx.percentiles),
                    "read_ttft_ms": distribution(_ttfts(read), ctx.percentiles),
                    "reads": len(read),
                    "write_e2e_ms_mean": distribution([r.e2e_ms for r in write if r.ok and r.e2e_ms is not None])[
                        "mean"
                    ],
                    "read_e2e_ms_mean": distribution([r.e2e_ms for r in read if r.ok and r.e2e_ms is not None])["mean"],
                }
            )
        return {"turns": rows, "read_turns": {str(c): self.read_turn(c) for c in range(self.conversations)}}


@dataclass(frozen=True)
class Pacing:
    """When a scheduled workload sends: a rate with an arrival process, and an optional time limit."""

    rate: float
    arrival: Arrival = "fixed"
    burstiness: float = 1.0
    seed: int = 0
    duration_s: float | None = None  # stop sending after this long (requests in flight finish)

    def offsets(self) -> Iterator[float]:
        times = send_offsets_ms(self.rate, self.arrival, self.burstiness, self.seed)
        if self.duration_s is None:
            return times
        limit = self.duration_s * 1000
        return itertools.takewhile(lambda at: at < limit, times)


def _send_lag(records: Sequence[RequestRecord], percentiles: tuple[float, ...]) -> dict[str, float | None]:
    return distribution([x.start_ms - x.scheduled_ms for x in records if x.scheduled_ms is not None], percentiles)


@dataclass(frozen=True)
class SharedPrefix(Workload):
    name: ClassVar[str] = "shared-prefix"
    runs: ClassVar[tuple[str, ...]] = ("shared-prefix",)
    url: str
    users: int = 20
    rounds: int = 3  # questions per user; with a duration, rounds go on until it ends
    system_tokens: int = 2000
    user_tokens: int = 200
    question_tokens: int = 50
    max_tokens: int = 16
    qps: float = 2.0
    concurrency: int | None = 8
    user_header: str | None = SESSION_HEADER  # session routing keys on it (the router's --session-key)
    arrival: Arrival = "fixed"
    burstiness: float = 1.0
    duration_s: float | None = None

    def urls(self) -> list[str]:
        return [self.url]

    def planned(self) -> int | None:
        return None if self.duration_s is not None else self.users * self.rounds

    def _requests(self, ctx: Context) -> Iterator[Request]:
        system = ctx.maker.system_prompt(self.system_tokens)
        pacing = Pacing(self.qps, self.arrival, self.burstiness, ctx.maker.seed, self.duration_s)
        total = None if self.duration_s is not None else self.users * self.rounds
        for index, at in enumerate(pacing.offsets()):
            if total is not None and index >= total:
                return
            r, u = divmod(index, self.users)
            context = " ".join(ctx.maker.words(f"user:{u}:context", self.user_tokens))
            question = " ".join(ctx.maker.words(f"user:{u}:question:{r}", self.question_tokens))
            if ctx.api == "chat":
                text: str | list[dict[str, str]] = [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"{context} {question}"},
                ]
            else:
                text = f"{system} {context} {question}"
            headers = ctx.request_id(self.name, index)
            if self.user_header:
                headers[self.user_header] = f"user-{u}"
            tags = {"user": u, "round": r + 1}
            body = ctx.body(text, self.max_tokens)
            yield Request(self.name, self.url, ctx.api, body, index, tags, headers, scheduled_ms=at)

    async def run(self, session: Session, ctx: Context) -> None:
        # Built before the first send (a duration makes the schedule finite too): making prompt text while streams
        # are being read would delay their reading and inflate what is measured.
        await session.schedule(list(self._requests(ctx)), concurrency=self.concurrency)

    def details(self, records: Sequence[RequestRecord], ctx: Context) -> dict[str, Any]:
        rounds = []
        for r in sorted({x.tags["round"] for x in records}):
            rounds.append(
                {
                    "round": r,
                    "ttft_ms": distribution(_ttfts([x for x in records if x.tags["round"] == r]), ctx.percentiles),
                }
            )
        return {"rounds": rounds, "send_lag_ms": _send_lag(records, ctx.percentiles)}


@dataclass(frozen=True)
class TraceReplay(Workload):
    name: ClassVar[str] = "trace"
    runs: ClassVar[tuple[str, ...]] = ("trace",)
    url: str
    path: Path
    requests: tuple[TraceRequest, ...]
    time_scale: float | None = 1.0  # send at timestamp * time_scale (0.1: ten times faster)
    qps: float | None = None  # or at a rate, in trace order
    max_model_len: int | None = 16384
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    max_tokens: int | None = None  # cap on output_length
    concurrency: int | None = None
    arrival: Arrival = "fixed"  # with qps
    burstiness: float = 1.0
    duration_s: float | None = None  # send only what is scheduled before this

    def urls(self) -> list[str]:
        return [self.url]

    def output_tokens(self, req: TraceRequest) -> int:
        return min(req.output_length, self.max_tokens) if self.max_tokens else req.output_length

    def plan(self) -> tuple[list[TraceRequest], list[TraceRequest]]:
        """(kept, skipped): in timestamp order, file order breaking ties; skipped ones exceed max_model_len."""
        ordered = sorted(self.requests, key=lambda r: (r.timestamp_ms, r.line))
        if self.max_model_len is None:
            return ordered, []
        limit = self.max_model_len
        kept = [r for r in ordered if r.input_length + self.output_tokens(r) <= limit]
        skipped = [r for r in ordered if r.input_length + self.output_tokens(r) > limit]
        return kept, skipped

    def schedule(self, seed: int = 0) -> list[tuple[TraceRequest, float]]:
        """The kept requests with their send times (ms from the first), cut at the duration if one is set."""
        kept, _ = self.plan()
        if self.qps is not None:
            times: Iterator[float] = send_offsets_ms(self.qps, self.arrival, self.burstiness, seed)
        else:
            first = kept[0].timestamp_ms if kept else 0.0
            scale = self.time_scale if self.time_scale is not None else 1.0
            times = iter([(tr.timestamp_ms - first) * scale for tr in kept])
        planned = list(zip(kept, times, strict=False))
        if self.duration_s is not None:
            planned = [(tr, at) for tr, at in planned if at < self.duration_s * 1000]
        previous = 0.0
        for request, at in planned:
            if at - previous > MAX_SEND_GAP_S * 1000:
                raise TraceError(
                    f"{self.path}:{request.line}: this request would be sent {(at - previous) / 1000:.3g} s after the "
                    f"previous one, beyond {MAX_SEND_GAP_S:g} s; fix its timestamp (milliseconds), or give a smaller "
                    "--time-scale or a --duration"
                )
            previous = at
        return planned

    def planned(self) -> int:
        return len(self.schedule())

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "requests_in_file": len(self.requests)}

    async def run(self, session: Session, ctx: Context) -> None:
        def requests() -> Iterator[Request]:
            seen: set[int] = set()
            for i, (tr, at) in enumerate(self.schedule(ctx.maker.seed)):
                tags = {
                    "line": tr.line,
                    "timestamp_ms": tr.timestamp_ms,
                    "input_length": tr.input_length,
                    "output_length": tr.output_length,
                    "blocks": len(tr.hash_ids),
                    "shared_blocks": _leading_seen(tr.hash_ids, seen),
                }
                seen.update(tr.hash_ids)
                body = ctx.body(trace_prompt(tr, ctx.maker, self.block_tokens), self.output_tokens(tr))
                yield Request(self.name, self.url, ctx.api, body, i, tags, ctx.request_id(self.name, i), at)

        # Built one at a time as the schedule reaches them (a body of a long trace request is megabytes, and a
        # 12k-request trace's were 0.9 GB up front); with --concurrency only once a slot is free.
        await session.schedule(requests(), concurrency=self.concurrency)

    def details(self, records: Sequence[RequestRecord], ctx: Context) -> dict[str, Any]:
        kept, skipped = self.plan()
        planned = [tr for tr, _ in self.schedule(ctx.maker.seed)]
        seen: set[int] = set()
        reusable = 0
        for tr in planned:
            reusable += min(_leading_seen(tr.hash_ids, seen) * self.block_tokens, tr.input_length)
            seen.update(tr.hash_ids)
        total_input = sum(tr.input_length for tr in planned)
        return {
            "requests_in_file": len(self.requests),
            "replayed": len(planned),
            "cut_by_duration": len(kept) - len(planned),
            "skipped_over_max_model_len": len(skipped),
            "skipped_lines": [tr.line for tr in skipped][:100],
            "reusable_prefix_tokens": reusable,
            "input_tokens": total_input,
            "reusable_prefix_ratio": reusable / total_input if total_input else None,
            "send_lag_ms": _send_lag(records, ctx.percentiles),
        }


def _leading_seen(ids: tuple[int, ...], seen: set[int]) -> int:
    """How many leading block ids were in an earlier request (ids are prefix-chained: a seen id means its prefix)."""
    count = 0
    for block in ids:
        if block not in seen:
            break
        count += 1
    return count
