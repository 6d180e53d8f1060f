"""The benchmark's HTTP client (aiohttp, as `vllm bench serve` uses) and the one GET that probes and scrapes share.

aiohttp parses HTTP with a compiled parser where httpx parses in Python (h11): at 64 streams in flight the move cut
the client's CPU per request to about a third, half of `vllm bench serve`'s (docs/benchmarks.md "Bench client CPU";
aiohttp's behaviour relied on here: docs/references.md "Issue 28: the bench client on aiohttp").
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

# What a request can fail with below the HTTP status: aiohttp's own errors, and its timeouts (TimeoutError).
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError, TimeoutError)
CONNECT_TIMEOUT_S = 10.0  # at most this long for a TCP (or TLS) connect, whatever the request's own timeout


def new_client(timeout_s: float) -> aiohttp.ClientSession:
    """One pool of keep-alive connections for a whole run; call it inside the event loop that uses it.

    limit=0: no cap on connections (the workload bounds what is in flight, not the pool). No total timeout here:
    `send` bounds each whole request itself. The session ignores proxy variables (aiohttp's trust_env=False
    default): a proxy from the environment must not reroute a benchmark (or a local test) elsewhere.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, connect=min(timeout_s, CONNECT_TIMEOUT_S), sock_read=timeout_s),
        trust_env=False,
    )


@dataclass(frozen=True)
class Answer:
    """A GET's status, Content-Type header ("" when absent) and body decoded as UTF-8."""

    status: int
    content_type: str
    text: str


async def get(client: aiohttp.ClientSession, url: str, *, timeout_s: float) -> Answer:
    """GET `url` and read the whole body within `timeout_s`; raises one of TRANSPORT_ERRORS when there is no answer."""
    async with client.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        body = await resp.read()
        return Answer(resp.status, resp.headers.get("content-type", ""), body.decode("utf-8", "replace"))


def describe(err: BaseException, fallback: str = "no answer") -> str:
    """`Type: message` of a transport error (aiohttp's timeouts carry no message)."""
    return f"{type(err).__name__}: {str(err) or fallback}"
