"""What one benchmark request is (`Request`) and what was measured for it (`RequestRecord`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Api = Literal["completions", "chat"]
API_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# connect: nothing answered; reset: the connection broke (reset or closed) before the answer was complete;
# the others mean a server did answer (or the wait ran out).
ErrorKind = Literal["connect", "reset", "timeout", "http", "not_streaming", "protocol", "server"]


@dataclass(frozen=True)
class Request:
    """One request to send: the body is serialized once so the same bytes can go to two URLs."""

    run: str  # the group it is summarized in: "cold", "reused", "write", "read", "shared-prefix", "trace"
    url: str  # base URL, without /v1
    api: Api
    body: bytes
    index: int  # position in the workload
    tags: dict[str, Any] = field(default_factory=dict)  # length, turn, conversation, user, trace line...
    headers: dict[str, str] = field(default_factory=dict)
    scheduled_ms: float | None = None  # planned send time from the start of the workload

    def with_url(self, url: str, run: str, headers: dict[str, str] | None = None) -> Request:
        """The same body for another URL and run; `headers` replace same-named ones (a new request id)."""
        merged = {**self.headers, **(headers or {})}
        return Request(run, url, self.api, self.body, self.index, dict(self.tags), merged, self.scheduled_ms)


def request_body(
    api: Api, model: str, text: str | list[dict[str, str]], max_tokens: int, *, ignore_eos: bool = False
) -> bytes:
    """An OpenAI-style streaming body at temperature 0 that asks for `usage` in the last chunk."""
    body: dict[str, Any] = {"model": model}
    if api == "completions":
        body["prompt"] = text if isinstance(text, str) else render_chat(text)
    else:
        body["messages"] = [{"role": "user", "content": text}] if isinstance(text, str) else text
    body.update(max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True})
    if ignore_eos:
        body["ignore_eos"] = True  # a vLLM extension: output lengths as asked (trace replay)
    return json.dumps(body, separators=(",", ":")).encode()


def render_chat(messages: list[dict[str, str]]) -> str:
    """A conversation as plain text, for servers driven through /v1/completions."""
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


@dataclass
class RequestRecord:
    """Timings (ms from the start of the workload or of the request) and token counts of one request."""

    run: str
    url: str
    index: int
    tags: dict[str, Any]
    start_ms: float  # when the request was sent, from the start of the workload
    scheduled_ms: float | None = None
    ok: bool = False
    answered: bool = False  # an HTTP response (any status) arrived
    status: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    ttft_ms: float | None = None  # send -> first chunk carrying generated text
    e2e_ms: float | None = None  # send -> end of stream (or failure)
    itl_ms: list[float] = field(default_factory=list)  # gaps between chunks carrying text
    tpot_ms: float | None = None  # (last text chunk - first) / (completion tokens - 1), for 2 or more tokens
    text_chunks: int = 0  # chunks that carried generated text (a chunk may carry several tokens)
    prompt_tokens: int | None = None  # from the server's `usage`
    completion_tokens: int | None = None  # from `usage`, else the number of text chunks
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when the server reports it
    usage_reported: bool = False
    output_text: str = ""  # kept in memory (multiturn history), not written to JSON
    replica: str | None = None  # the replica that served it, when the router's metrics tell (bench/replicas.py)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in vars(self).items() if k != "output_text"}
        out["itl_ms"] = [round(v, 3) for v in self.itl_ms]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
