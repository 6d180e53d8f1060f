"""The four workloads. Each builds its requests, sends them through a Session, and returns a details table.

- sweep: one prompt per length, cold on the write URL, then the same bytes on the read URL (cross-pod reuse).
- multiturn: conversations whose history accumulates turn by turn; then the same requests on the read URL.
- shared-prefix: many users sharing one system prompt, at a target QPS and concurrency (like multi-round QA).
- trace: a Mooncake trace replayed by timestamp (time-scaled) or at a fixed QPS; equal hash ids, equal text.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kvtier.bench.prompts import PromptMaker
from kvtier.bench.records import Api, Request, RequestRecord, request_body
from kvtier.bench.session import Session
from kvtier.bench.stats import distribution
from kvtier.bench.trace import trace_prompt
from kvtier.serving import SESSION_HEADER
from kvtier.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


@dataclass(frozen=True)
class Context:
    model: str
    api: Api
    maker: PromptMaker
    ignore_eos: bool = False

    def body(self, text: str | list[dict[str, str]], max_tokens: int) -> bytes:
        return request_body(self.api, self.model, text, max_tokens, ignore_eos=self.ignore_eos)

    def request_id(self, run: str, index: int) -> dict[str, str]:
        return {"x-request-id": f"kvtier-bench-{self.maker.salt}-{run}-{index}"}


class Workload(ABC):
    name: ClassVar[str]
    runs: ClassVar[tuple[str, ...]]  # run names in report order

    @abstractmethod
    def urls(self) -> list[str]:
        """Every URL the workload sends to (the ones probed and scraped)."""

    @abstractmethod
    def planned(self) -> int:
        """How many requests it will send (for the progress bar)."""

    @abstractmethod
    async def run(self, session: Session, ctx: Context) -> dict[str, Any]:
        """Send everything; return the workload's own table for the result file."""

    def settings(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items() if k != "requests"}


def _dedupe(urls: list[str | None]) -> list[str]:
    return list(dict.fromkeys(u for u in urls if u))


@dataclass(frozen=True)
class Sweep(Workload):
    name: ClassVar[str] = "sweep"
    runs: ClassVar[tuple[str, ...]] = ("cold", "reused", "local")
    write_url: str
    read_url: str
    lengths: tuple[int, ...]
    max_tokens: int = 4
    settle_s: float = 1.0  # LMCache stores to L2 asynchronously: give the write a moment before the read
    local_repeat: bool = False  # also repeat on the write URL (its L0 hit), run "local"

    def urls(self) -> list[str]:
        return _dedupe([self.write_url, self.read_url])

    def planned(self) -> int:
        return len(self.lengths) * (3 if self.local_repeat else 2)

    async def run(self, session: Session, ctx: Context) -> dict[str, Any]:
        rows = []
        for i, length in enumerate(self.lengths):
            body = ctx.body(ctx.maker.sweep_prompt(length), self.max_tokens)
            cold_req = Request("cold", self.write_url, ctx.api, body, i, {"length": length}, ctx.request_id("cold", i))
            cold = await session.one(cold_req)
            if self.settle_s > 0:
                await asyncio.sleep(self.settle_s)
            reused_req = Request(
                "reused", self.read_url, ctx.api, body, i, {"length": length}, ctx.request_id("reused", i)
            )
            reused = await session.one(reused_req)
            local = None
            if self.local_repeat:
                local_req = Request(
                    "local", self.write_url, ctx.api, body, i, {"length": length}, ctx.request_id("local", i)
                )
                local = await session.one(local_req)
            rows.append(_sweep_row(length, cold, reused, local))
        return {"sweep": rows, "same_url": self.write_url == self.read_url}


def _sweep_row(length: int, cold: RequestRecord, reused: RequestRecord, local: RequestRecord | None) -> dict[str, Any]:
    cold_ttft = cold.ttft_ms if cold.ok else None
    reused_ttft = reused.ttft_ms if reused.ok else None
    return {
        "length": length,
        "prompt_tokens": cold.prompt_tokens if cold.prompt_tokens is not None else reused.prompt_tokens,
        "cold_ttft_ms": cold_ttft,
        "reused_ttft_ms": reused_ttft,
        "local_ttft_ms": local.ttft_ms if local is not None and local.ok else None,
        "speedup": cold_ttft / reused_ttft if cold_ttft and reused_ttft else None,
        "cold_cached_tokens": cold.cached_tokens,
        "reused_cached_tokens": reused.cached_tokens,
        "cold_error": cold.error if not cold.ok else None,
        "reused_error": reused.error if not reused.ok else None,
    }


@dataclass(frozen=True)
class MultiTurn(Workload):
    name: ClassVar[str] = "multiturn"
    runs: ClassVar[tuple[str, ...]] = ("write", "read")
    write_url: str
    read_url: str | None
    conversations: int = 4
    turns: int = 5
    system_tokens: int = 500
    turn_tokens: int = 200
    max_tokens: int = 32
    settle_s: float = 1.0
    concurrency: int | None = None  # conversations in flight at once (None: all)

    def urls(self) -> list[str]:
        return _dedupe([self.write_url, self.read_url])

    def planned(self) -> int:
        return self.conversations * self.turns * (2 if self.read_url else 1)

    async def run(self, session: Session, ctx: Context) -> dict[str, Any]:
        limit = asyncio.Semaphore(self.concurrency or self.conversations)

        async def conversation(c: int) -> list[Request]:
            async with limit:
                return await self._converse(session, ctx, c)

        sent = await asyncio.gather(*(conversation(c) for c in range(self.conversations)))
        if self.read_url:
            read_url = self.read_url
            if self.settle_s > 0:
                await asyncio.sleep(self.settle_s)

            async def replay(reqs: list[Request]) -> None:
                async with limit:
                    for req in reqs:
                        await session.one(req.with_url(read_url, "read", ctx.request_id("read", req.index)))

            await asyncio.gather(*(replay(reqs) for reqs in sent))
        return {"turns": self._per_turn(session.records)}

    async def _converse(self, session: Session, ctx: Context, c: int) -> list[Request]:
        head = ctx.maker.header(f"conversation {c}")
        system = " ".join(head + ctx.maker.words(f"conv:{c}:system", self.system_tokens - len(head)))
        messages = [{"role": "system", "content": system}]
        sent = []
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
            messages.append({"role": "assistant", "content": record.output_text})
            sent.append(req)
        return sent

    def _per_turn(self, records: list[RequestRecord]) -> list[dict[str, Any]]:
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
                    "write_ttft_ms": distribution([r.ttft_ms for r in write if r.ok and r.ttft_ms is not None]),
                    "read_ttft_ms": distribution([r.ttft_ms for r in read if r.ok and r.ttft_ms is not None]),
                    "write_e2e_ms_mean": distribution([r.e2e_ms for r in write if r.ok and r.e2e_ms is not None])[
                        "mean"
                    ],
                    "read_e2e_ms_mean": distribution([r.e2e_ms for r in read if r.ok and r.e2e_ms is not None])["mean"],
                }
            )
        return rows


@dataclass(frozen=True)
class SharedPrefix(Workload):
    name: ClassVar[str] = "shared-prefix"
    runs: ClassVar[tuple[str, ...]] = ("shared-prefix",)
    url: str
    users: int = 20
    rounds: int = 3
    system_tokens: int = 2000
    user_tokens: int = 200
    question_tokens: int = 50
    max_tokens: int = 16
    qps: float = 2.0
    concurrency: int | None = 8
    user_header: str | None = SESSION_HEADER  # session routing keys on it (the router's --session-key)

    def urls(self) -> list[str]:
        return [self.url]

    def planned(self) -> int:
        return self.users * self.rounds

    async def run(self, session: Session, ctx: Context) -> dict[str, Any]:
        system = ctx.maker.system_prompt(self.system_tokens)
        reqs = []
        for r in range(self.rounds):
            for u in range(self.users):
                index = r * self.users + u
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
                reqs.append(
                    Request(
                        self.name,
                        self.url,
                        ctx.api,
                        ctx.body(text, self.max_tokens),
                        index,
                        {"user": u, "round": r + 1},
                        headers,
                        scheduled_ms=index * 1000 / self.qps,
                    )
                )
        records = await session.schedule(reqs, concurrency=self.concurrency)
        rounds = []
        for r in range(1, self.rounds + 1):
            ttfts = [x.ttft_ms for x in records if x.tags["round"] == r and x.ok and x.ttft_ms is not None]
            rounds.append({"round": r, "ttft_ms": distribution(ttfts)})
        late = [x.start_ms - x.scheduled_ms for x in records if x.scheduled_ms is not None]
        return {"rounds": rounds, "send_lag_ms": distribution(late)}


@dataclass(frozen=True)
class TraceReplay(Workload):
    name: ClassVar[str] = "trace"
    runs: ClassVar[tuple[str, ...]] = ("trace",)
    url: str
    path: Path
    requests: tuple[TraceRequest, ...]
    time_scale: float | None = 1.0  # send at timestamp * time_scale (0.1: ten times faster)
    qps: float | None = None  # or at a fixed rate, in trace order
    max_model_len: int | None = 16384
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    max_tokens: int | None = None  # cap on output_length
    concurrency: int | None = None

    def urls(self) -> list[str]:
        return [self.url]

    def send_at_ms(self, tr: TraceRequest, position: int, first_ms: float) -> float:
        if self.qps is not None:
            return position * 1000 / self.qps
        return (tr.timestamp_ms - first_ms) * (self.time_scale if self.time_scale is not None else 1.0)

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

    def planned(self) -> int:
        return len(self.plan()[0])

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "requests_in_file": len(self.requests)}

    async def run(self, session: Session, ctx: Context) -> dict[str, Any]:
        kept, skipped = self.plan()
        start = kept[0].timestamp_ms if kept else 0.0
        seen: set[int] = set()
        reqs = []
        reusable = 0
        for i, tr in enumerate(kept):
            shared_blocks = _leading_seen(tr.hash_ids, seen)
            seen.update(tr.hash_ids)
            reusable += min(shared_blocks * self.block_tokens, tr.input_length)
            reqs.append(
                Request(
                    self.name,
                    self.url,
                    ctx.api,
                    ctx.body(trace_prompt(tr, ctx.maker, self.block_tokens), self.output_tokens(tr)),
                    i,
                    {
                        "line": tr.line,
                        "timestamp_ms": tr.timestamp_ms,
                        "input_length": tr.input_length,
                        "output_length": tr.output_length,
                        "blocks": len(tr.hash_ids),
                        "shared_blocks": shared_blocks,
                    },
                    ctx.request_id(self.name, i),
                    scheduled_ms=self.send_at_ms(tr, i, start),
                )
            )
        records = await session.schedule(reqs, concurrency=self.concurrency)
        late = [x.start_ms - x.scheduled_ms for x in records if x.scheduled_ms is not None]
        total_input = sum(tr.input_length for tr in kept)
        return {
            "requests_in_file": len(self.requests),
            "replayed": len(kept),
            "skipped_over_max_model_len": len(skipped),
            "skipped_lines": [tr.line for tr in skipped][:100],
            "reusable_prefix_tokens": reusable,
            "input_tokens": total_input,
            "reusable_prefix_ratio": reusable / total_input if total_input else None,
            "send_lag_ms": distribution(late),
        }


def _leading_seen(ids: tuple[int, ...], seen: set[int]) -> int:
    """How many leading block ids were in an earlier request (ids are prefix-chained: a seen id means its prefix)."""
    count = 0
    for block in ids:
        if block not in seen:
            break
        count += 1
    return count
