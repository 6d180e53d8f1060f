"""One streamed request to an OpenAI-compatible server, measured; and a probe that asks whether a URL answers.

Every failure becomes a field of the record (kind and message), never an exception: a benchmark counts errors.
Each stream is read to its end (past `[DONE]`), so httpx returns the connection to its pool and the next request
reuses it: a new TCP (or TLS, or port-forward) connection must not land inside every TTFT.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from kvtier.bench.records import API_PATHS, ErrorKind, Request, RequestRecord

_SNIPPET = 200  # characters of an error body kept in the record


def normalize_url(url: str) -> str:
    """`http://host:8000/v1/` and `http://host:8000` name the same server: keep the base without /v1."""
    url = url.rstrip("/")
    return url.removesuffix("/v1")


async def send(client: httpx.AsyncClient, req: Request, *, timeout_s: float, origin: float) -> RequestRecord:
    """Send `req`, read its SSE stream, and return what was measured; `origin` is the workload's perf_counter zero."""
    start = time.perf_counter()
    record = RequestRecord(
        req.run, req.url, req.index, dict(req.tags), (start - origin) * 1000, scheduled_ms=req.scheduled_ms
    )
    reader = _StreamReader(start)
    try:
        async with asyncio.timeout(timeout_s):
            await _exchange(client, req, record, reader)
    except TimeoutError:
        _fail(record, "timeout", f"no complete answer within {timeout_s:g} s")
    except (httpx.ConnectError, httpx.ConnectTimeout) as err:
        _fail(record, "connect", f"cannot connect to {req.url}: {err or type(err).__name__}")
    except httpx.TimeoutException as err:
        _fail(record, "timeout", f"{type(err).__name__}: {err}")
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as err:
        if isinstance(err, httpx.RemoteProtocolError) and not _closed_early(err):
            _fail(record, "protocol", f"{type(err).__name__}: {err}")
        else:
            _fail(record, "reset", _reset_message(req.url, record, reader, err))
    except httpx.HTTPError as err:
        _fail(record, "protocol", f"{type(err).__name__}: {err}")
    end = time.perf_counter()
    record.e2e_ms = (end - start) * 1000
    reader.finish(record)
    return record


async def _exchange(client: httpx.AsyncClient, req: Request, record: RequestRecord, reader: _StreamReader) -> None:
    headers = {"content-type": "application/json", "accept": "text/event-stream", **req.headers}
    async with client.stream("POST", req.url + API_PATHS[req.api], content=req.body, headers=headers) as resp:
        record.answered = True
        record.status = resp.status_code
        if resp.status_code >= 400:
            body = (await resp.aread()).decode(errors="replace")
            _fail(record, "http", f"HTTP {resp.status_code}: {_snippet(body)}")
            return
        ctype = resp.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await resp.aread()
            _fail(record, "not_streaming", f"the server did not stream (content-type '{ctype or 'none'}')")
            return
        # Lines split here from the decoded bytes: httpx's aiter_lines stacks two more async generators and a text
        # decoder on every network chunk, a measurable share of the client's CPU at 64 streams in flight.
        pending = b""
        async for data in resp.aiter_bytes():
            if reader.done:
                continue  # past [DONE]: read on to the end of the body so the connection can be reused
            *lines, pending = (pending + data).split(b"\n")
            if not reader.feed_lines(lines, record):
                break  # a broken stream: the connection is closed, not reused
        else:
            reader.feed_lines([pending] if pending else [], record)
    if record.error_kind is None:
        reader.check_complete(record)


class _StreamReader:
    """Parses `data:` lines of an OpenAI SSE stream and times the chunks that carry generated text."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first_chunk: float | None = None
        self.text_times: list[float] = []
        self.parts: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.done = False

    def feed_lines(self, lines: list[bytes], record: RequestRecord) -> bool:
        """Handle raw lines until [DONE]; False: a broken stream."""
        for line in lines:
            if self.done:
                return True
            if not self.feed(line.decode("utf-8", "replace").rstrip("\r"), record):
                return False
        return True

    def feed(self, line: str, record: RequestRecord) -> bool:
        """Handle one line; False stops reading (a broken stream)."""
        if not line.startswith("data:"):
            return True  # blank separators, comments, `event:` lines
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return True
        now = time.perf_counter()
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            _fail(record, "protocol", f"a stream line is not JSON: {_snippet(payload)}")
            return False
        if not isinstance(chunk, dict):
            _fail(record, "protocol", f"a stream chunk is not an object: {_snippet(payload)}")
            return False
        if chunk.get("error"):
            _fail(record, "server", f"the server reported an error mid-stream: {_snippet(json.dumps(chunk['error']))}")
            return False
        if self.first_chunk is None:
            self.first_chunk = now
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        text = "".join(_choice_text(c) for c in chunk.get("choices") or [] if isinstance(c, dict))
        if text:
            self.text_times.append(now)
            self.parts.append(text)
        return True

    def check_complete(self, record: RequestRecord) -> None:
        if self.first_chunk is None:
            _fail(record, "protocol", "the stream ended without any data chunk")
        else:
            record.ok = True
            if not self.done:
                record.error = "the stream ended without [DONE]"  # measured anyway; noted

    def finish(self, record: RequestRecord) -> None:
        """Copy timings and token counts into the record (also for failed requests, as far as they got)."""
        if self.text_times or self.first_chunk is not None:
            first = self.text_times[0] if self.text_times else self.first_chunk
            assert first is not None
            record.ttft_ms = (first - self.start) * 1000
        record.itl_ms = [(b - a) * 1000 for a, b in zip(self.text_times, self.text_times[1:], strict=False)]
        record.output_text = "".join(self.parts)
        record.completion_tokens = len(self.text_times)
        record.text_chunks = len(self.text_times)
        if self.usage is not None:
            record.usage_reported = True
            record.prompt_tokens = _int(self.usage.get("prompt_tokens"))
            completion = _int(self.usage.get("completion_tokens"))
            if completion is not None:
                record.completion_tokens = completion
            details = self.usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                record.cached_tokens = _int(details.get("cached_tokens"))
        tokens = record.completion_tokens or 0
        if len(self.text_times) >= 2 and tokens > 1:
            # vLLM's TPOT: decode time (first to last token) over the tokens after the first.
            record.tpot_ms = (self.text_times[-1] - self.text_times[0]) * 1000 / (tokens - 1)


def _choice_text(choice: dict[str, Any]) -> str:
    """Generated text of one choice: `text` (completions) or the delta's content or reasoning (chat)."""
    text = choice.get("text")
    if isinstance(text, str) and text:
        return text
    delta = choice.get("delta")
    if isinstance(delta, dict):
        for key in ("content", "reasoning_content", "reasoning"):
            value = delta.get(key)
            if isinstance(value, str) and value:
                return value
    return ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _closed_early(err: httpx.RemoteProtocolError) -> bool:
    """The server closed the connection before the answer was complete (not a malformed answer)."""
    text = str(err).lower()
    return "peer closed" in text or "disconnected" in text or "incomplete" in text


def _reset_message(url: str, record: RequestRecord, reader: _StreamReader, err: httpx.HTTPError) -> str:
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, OSError):  # httpx -> httpcore -> the socket's own error
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, OSError):
        why = f"{type(cause).__name__}: {cause.strerror or cause}"
    else:
        why = f"{type(err).__name__}: {err or 'the connection was lost'}"
    if not record.answered:
        when = "before it answered"
    elif not reader.text_times:
        when = "after the headers, before any generated text"
    else:
        when = f"after {len(reader.text_times)} chunks of generated text"
    return f"{url} closed or reset the connection {when} ({why}); the server process or a proxy in between went away"


def _fail(record: RequestRecord, kind: ErrorKind, message: str) -> None:
    record.ok = False
    record.error_kind = kind
    record.error = message


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


@dataclass(frozen=True)
class Probe:
    """Whether a base URL answered `GET /v1/models`, and the model ids it listed."""

    url: str
    answered: bool
    status: int | None
    models: tuple[str, ...]
    error: str | None


async def probe(client: httpx.AsyncClient, url: str, *, timeout_s: float) -> Probe:
    try:
        resp = await client.get(url + "/v1/models", timeout=timeout_s)
    except httpx.HTTPError as err:
        return Probe(url, False, None, (), f"{type(err).__name__}: {err or 'no answer'}")
    models: tuple[str, ...] = ()
    error = None if resp.status_code < 400 else f"HTTP {resp.status_code}"
    try:
        data = resp.json().get("data", [])
        models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
    except (ValueError, AttributeError):
        error = error or "GET /v1/models did not return a JSON model list"
    if error is not None:  # say what answered instead, so a wrong URL or port is recognisable
        kind = resp.headers.get("content-type", "no content type").split(";")[0].strip()
        error += f" ({kind}: {_snippet(resp.text)!r})" if resp.text.strip() else f" ({kind}, empty body)"
    return Probe(url, True, resp.status_code, models, error)
