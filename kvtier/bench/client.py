"""One streamed request to an OpenAI-compatible server, measured; and a probe that asks whether a URL answers.

Every failure becomes a field of the record (kind and message), never an exception: a benchmark counts errors.
Each stream is read to its end (past `[DONE]`), so aiohttp returns the connection to its pool and the next request
reuses it: a new TCP (or TLS, or port-forward) connection must not land inside every TTFT. A stream broken off
early closes its connection instead (aiohttp never pools one whose body was not read to the end).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from kvtier.bench.http import TRANSPORT_ERRORS, describe, get
from kvtier.bench.records import API_PATHS, ErrorKind, Request, RequestRecord

_SNIPPET = 200  # characters of an error body kept in the record
# aiohttp's words for a body cut short (client_proto.py `connection_lost`): the peer went away, not a bad answer.
_CUT_SHORT = ("not completed", "not enough data", "connection lost")


def normalize_url(url: str) -> str:
    """`http://host:8000/v1/` and `http://host:8000` name the same server: keep the base without /v1."""
    url = url.rstrip("/")
    return url.removesuffix("/v1")


async def send(client: aiohttp.ClientSession, req: Request, *, timeout_s: float, origin: float) -> RequestRecord:
    """Send `req`, read its SSE stream, and return what was measured; `origin` is the workload's perf_counter zero."""
    start = time.perf_counter()
    record = RequestRecord(
        req.run, req.url, req.index, dict(req.tags), (start - origin) * 1000, scheduled_ms=req.scheduled_ms
    )
    reader = _StreamReader(start)
    try:
        async with asyncio.timeout(timeout_s):
            await _exchange(client, req, record, reader)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as err:
        _fail(record, "connect", f"cannot connect to {req.url}: {describe(err, 'timed out')}")
    except aiohttp.SocketTimeoutError as err:
        _fail(record, "timeout", f"{type(err).__name__}: nothing read for {timeout_s:g} s ({err})")
    except TimeoutError:
        _fail(record, "timeout", f"no complete answer within {timeout_s:g} s")
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as err:
        _fail(record, "reset", _reset_message(req.url, record, reader, err))
    except aiohttp.ClientPayloadError as err:
        if any(words in str(err).lower() for words in _CUT_SHORT):
            _fail(record, "reset", _reset_message(req.url, record, reader, err))
        else:
            _fail(record, "protocol", describe(err))
    except aiohttp.ClientError as err:
        _fail(record, "protocol", describe(err))
    end = time.perf_counter()
    record.e2e_ms = (end - start) * 1000
    reader.finish(record)
    return record


async def _exchange(client: aiohttp.ClientSession, req: Request, record: RequestRecord, reader: _StreamReader) -> None:
    headers = {"content-type": "application/json", "accept": "text/event-stream", **req.headers}
    async with client.post(req.url + API_PATHS[req.api], data=req.body, headers=headers) as resp:
        record.answered = True
        record.status = resp.status
        if resp.status >= 400:
            body = (await resp.read()).decode(errors="replace")
            _fail(record, "http", f"HTTP {resp.status}: {_snippet(body)}")
            return
        ctype = resp.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await resp.read()
            _fail(record, "not_streaming", f"the server did not stream (content-type '{ctype or 'none'}')")
            return
        # Each network chunk as it arrives (what `vllm bench serve` reads too), split into lines here.
        pending = b""
        async for data in resp.content.iter_any():
            if reader.done:
                continue  # past [DONE]: read on to the end of the body so the connection can be reused
            *lines, pending = (pending + data).split(b"\n")
            if not reader.feed_lines(lines, record):
                resp.close()  # a broken stream: the connection is closed, not reused
                break
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


def _reset_message(url: str, record: RequestRecord, reader: _StreamReader, err: aiohttp.ClientError) -> str:
    cause: BaseException | None = err
    while cause is not None and not _socket_error(cause):  # aiohttp's error -> the socket's own, where it is kept
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


def _socket_error(err: BaseException) -> bool:
    """An OSError from the socket itself (aiohttp's ClientOSError is one too, but names no errno cause)."""
    return isinstance(err, OSError) and not isinstance(err, aiohttp.ClientError)


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


async def probe(client: aiohttp.ClientSession, url: str, *, timeout_s: float) -> Probe:
    try:
        answer = await get(client, url + "/v1/models", timeout_s=timeout_s)
    except TRANSPORT_ERRORS as err:
        return Probe(url, False, None, (), describe(err))
    models: tuple[str, ...] = ()
    error = None if answer.status < 400 else f"HTTP {answer.status}"
    try:
        data = json.loads(answer.text).get("data", [])
        models = tuple(str(m["id"]) for m in data if isinstance(m, dict) and "id" in m)
    except (ValueError, AttributeError, TypeError):
        error = error or "GET /v1/models did not return a JSON model list"
    if error is not None:  # say what answered instead, so a wrong URL or port is recognisable
        kind = answer.content_type.split(";")[0].strip() or "no content type"
        error += f" ({kind}: {_snippet(answer.text)!r})" if answer.text.strip() else f" ({kind}, empty body)"
    return Probe(url, True, answer.status, models, error)
