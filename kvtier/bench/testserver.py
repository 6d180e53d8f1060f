"""A local stand-in for vLLM + LMCache pods, for tests and demos: OpenAI-style SSE with programmed delays.

Each server has its own prefix cache (L0, by blocks of words) and all servers of a cluster share one store (L2).
The time to first token is programmed, not computed by a model:

    delay = (warm_s * local_hit + l2_s * l2_hit + cold_s * miss) / prompt_words

so a new prompt waits `cold_s`, a prompt fully in this server's cache about `warm_s`, one fully in the shared store
about `l2_s` (a partial last block is never cached, as in vLLM). Every request is logged with the delay it got.
/metrics serves vLLM- and LMCache-named counters that move with the hits. A "token" is a whitespace-separated word.

Run it by hand: `python -m kvtier.bench.testserver --port 8101 --port 8102` (Ctrl-C stops).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kvtier.serving import SESSION_HEADER

BYTES_PER_TOKEN = 1024  # what the fake L2 pretends each token's KV weighs


@dataclass(frozen=True)
class Behaviour:
    cold_s: float = 0.4
    l2_s: float = 0.2
    warm_s: float = 0.1
    itl_s: float = 0.01
    output_tokens: int = 16  # generated per request, capped by max_tokens
    block_words: int = 16
    stream: bool = True  # False: answer with one JSON body (a non-streaming server)
    fail_status: int | None = None  # answer every completion with this HTTP status
    stall_s: float = 0.0  # wait this long before answering (timeouts)
    metrics: bool = True  # False: /metrics answers 404
    lmcache_metrics: bool = True  # False: no lmcache:* series (PROMETHEUS_MULTIPROC_DIR unset)
    usage: bool = True  # send `usage` in the last chunk
    model: str = "kvtier/fake-model"


@dataclass
class Logged:
    """One completion request as the server saw it."""

    path: str
    request_id: str | None
    user: str | None  # the session header (SESSION_HEADER), which the shared-prefix workload sets per user
    arrival: float  # time.perf_counter() when the request was read
    words: list[str]
    delay_s: float
    local_hit: int
    l2_hit: int
    max_tokens: int
    body: dict[str, Any]


@dataclass
class SharedStore:
    blocks: set[str] = field(default_factory=set)


def _words(body: dict[str, Any]) -> list[str]:
    if "messages" in body:
        out: list[str] = []
        for m in body["messages"]:
            out += [f"<{m.get('role')}>", *str(m.get("content", "")).split()]
        return out
    return str(body.get("prompt", "")).split()


def _block_keys(words: list[str], size: int) -> list[str]:
    """Prefix-chained keys of each full block (a key names the whole prefix up to its block)."""
    keys, digest = [], hashlib.sha256()
    for start in range(0, len(words) - len(words) % size, size):
        digest.update(" ".join(words[start : start + size]).encode() + b"\x00")
        keys.append(digest.hexdigest())
    return keys


class FakeServer:
    def __init__(self, behaviour: Behaviour, shared: SharedStore) -> None:
        self.behaviour = behaviour
        self.shared = shared
        self.local: set[str] = set()
        self.counters: dict[str, float] = defaultdict(float)
        self.log: list[Logged] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def lookup(self, words: list[str]) -> tuple[float, int, int]:
        """(delay, local hit words, L2 hit words) for a prompt; then cache it locally and in the shared store."""
        b = self.behaviour
        keys = _block_keys(words, b.block_words)
        local = next((i for i, k in enumerate(keys) if k not in self.local), len(keys))
        l2 = next((i for i, k in enumerate(keys[local:]) if k not in self.shared.blocks), len(keys) - local)
        local_hit, l2_hit = local * b.block_words, l2 * b.block_words
        n = max(len(words), 1)
        miss = n - local_hit - l2_hit
        delay = (b.warm_s * local_hit + b.l2_s * l2_hit + b.cold_s * miss) / n
        new_in_l2 = [k for k in keys if k not in self.shared.blocks]
        self.local.update(keys)
        self.shared.blocks.update(keys)
        c = self.counters
        c["vllm:prefix_cache_queries_total"] += len(words)
        c["vllm:prefix_cache_hits_total"] += local_hit
        c["vllm:external_prefix_cache_queries_total"] += len(words) - local_hit
        c["vllm:external_prefix_cache_hits_total"] += l2_hit
        c["lmcache:num_requested_tokens_total"] += len(words) - local_hit
        c["lmcache:num_hit_tokens_total"] += l2_hit
        c["lmcache:num_remote_read_requests_total"] += l2
        c["lmcache:num_remote_read_bytes_total"] += l2_hit * BYTES_PER_TOKEN
        c["lmcache:num_remote_write_requests_total"] += len(new_in_l2)
        c["lmcache:num_remote_write_bytes_total"] += len(new_in_l2) * b.block_words * BYTES_PER_TOKEN
        c["local_compute"] += miss
        c["local_cache_hit"] += local_hit
        c["external_kv_transfer"] += l2_hit
        return delay, local_hit, l2_hit

    def metrics_text(self) -> str:
        c = self.counters
        labels = 'engine="0",model_name="fake \\"model\\", v1"'
        lines = [
            "# HELP vllm:prefix_cache_queries Prefix cache queries, in tokens.",
            "# TYPE vllm:prefix_cache_queries counter",
        ]
        for name in (
            "vllm:prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total",
            "vllm:external_prefix_cache_queries_total",
            "vllm:external_prefix_cache_hits_total",
        ):
            lines.append(f"{name}{{{labels}}} {c[name]}")
            lines.append(f"{name.removesuffix('_total')}_created{{{labels}}} 1.7e+09")
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            lines.append(f'vllm:prompt_tokens_by_source_total{{{labels},source="{source}"}} {c[source]}')
        lines.append(f"vllm:num_requests_running{{{labels}}} 0.0")
        if self.behaviour.lmcache_metrics:
            for name in (
                "lmcache:num_requested_tokens_total",
                "lmcache:num_hit_tokens_total",
                "lmcache:num_remote_read_requests_total",
                "lmcache:num_remote_read_bytes_total",
                "lmcache:num_remote_write_requests_total",
                "lmcache:num_remote_write_bytes_total",
            ):
                # Two workers: the counts are split over label sets, as with TP > 1.
                lines.append(f'{name}{{model_name="fake",worker_id="0",role="worker"}} {c[name] - c[name] // 2}')
                lines.append(f'{name}{{model_name="fake",worker_id="1",role="worker"}} {c[name] // 2}')
            lines.append('lmcache:retrieve_hit_rate{model_name="fake",worker_id="0",role="worker"} NaN')
        return "\n".join(lines) + "\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if request is not None:
                await self._route(*request, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (a timeout on its side)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter
    ) -> None:
        b = self.behaviour
        if method == "GET" and path == "/v1/models":
            await _respond(
                writer, 200, {"object": "list", "data": [{"id": b.model, "object": "model", "root": "/models/fake"}]}
            )
        elif method == "GET" and path == "/metrics":
            if b.metrics:
                await _respond(writer, 200, self.metrics_text(), "text/plain; version=0.0.4")
            else:
                await _respond(writer, 404, {"detail": "Not Found"})
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            await self._complete(path, headers, raw, writer)
        else:
            await _respond(writer, 404, {"detail": "Not Found"})

    async def _complete(self, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter) -> None:
        arrival = time.perf_counter()
        b = self.behaviour
        if b.stall_s:
            await asyncio.sleep(b.stall_s)
        if b.fail_status is not None:
            await _respond(writer, b.fail_status, {"error": {"message": "programmed failure", "code": b.fail_status}})
            return
        body = json.loads(raw)
        words = _words(body)
        delay, local_hit, l2_hit = self.lookup(words)
        max_tokens = int(body.get("max_tokens") or b.output_tokens)
        n_out = min(b.output_tokens, max_tokens)
        self.log.append(
            Logged(
                path,
                headers.get("x-request-id"),
                headers.get(SESSION_HEADER),
                arrival,
                words,
                delay,
                local_hit,
                l2_hit,
                max_tokens,
                body,
            )
        )
        seed = hashlib.sha256(" ".join(words).encode()).hexdigest()
        pieces = [f" w{seed[i % 60 : i % 60 + 4]}" for i in range(n_out)]
        chat = path.endswith("chat/completions")
        usage = {
            "prompt_tokens": len(words),
            "completion_tokens": n_out,
            "total_tokens": len(words) + n_out,
            "prompt_tokens_details": {"cached_tokens": local_hit + l2_hit},
        }
        if not b.stream or not body.get("stream"):
            await asyncio.sleep(delay + b.itl_s * max(n_out - 1, 0))
            message = (
                {"message": {"role": "assistant", "content": "".join(pieces)}} if chat else {"text": "".join(pieces)}
            )
            await _respond(
                writer, 200, {"choices": [{"index": 0, **message, "finish_reason": "length"}], "usage": usage}
            )
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        if chat:  # vLLM's first chat chunk carries the role and no text
            await _event(writer, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        # Sleep until `delay` after arrival, however long the parsing above took.
        await asyncio.sleep(max(0.0, arrival + delay - time.perf_counter()))
        for i, piece in enumerate(pieces):
            if i:
                await asyncio.sleep(b.itl_s)
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await _event(writer, {"choices": [{**choice, "finish_reason": "length" if i == n_out - 1 else None}]})
        if b.usage and (body.get("stream_options") or {}).get("include_usage"):
            await _event(writer, {"choices": [], "usage": usage})
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        key, _, value = header.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    raw = await reader.readexactly(int(headers.get("content-length", "0")))
    return method, path.split("?", 1)[0], headers, raw


async def _respond(writer: asyncio.StreamWriter, status: int, body: Any, ctype: str = "application/json") -> None:
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    writer.write(head.encode() + data)
    await writer.drain()


async def _event(writer: asyncio.StreamWriter, chunk: dict[str, Any]) -> None:
    writer.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await writer.drain()


class FakeCluster:
    """`count` fake servers sharing one L2 store, served from a background thread's event loop."""

    def __init__(self, count: int = 2, behaviour: Behaviour | None = None, ports: tuple[int, ...] = ()) -> None:
        self.shared = SharedStore()
        self.servers = [FakeServer(behaviour or Behaviour(), self.shared) for _ in range(count)]
        self._ports = ports or (0,) * count
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kvtier-fake-cluster", daemon=True)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def __enter__(self) -> FakeCluster:
        self._thread.start()
        for server, port in zip(self.servers, self._ports, strict=True):
            asyncio.run_coroutine_threadsafe(server.start(port), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.servers:
            asyncio.run_coroutine_threadsafe(server.stop(), self._loop).result(timeout=10)
        asyncio.run_coroutine_threadsafe(_cancel_others(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


async def _cancel_others() -> None:
    """Cancel handlers still running (a stalled answer whose client gave up), so none is left pending."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, action="append", help="port of one server (repeat for more)")
    parser.add_argument("--cold-s", type=float, default=Behaviour.cold_s)
    parser.add_argument("--l2-s", type=float, default=Behaviour.l2_s)
    parser.add_argument("--warm-s", type=float, default=Behaviour.warm_s)
    args = parser.parse_args()
    ports = tuple(args.port or [8101, 8102])
    behaviour = Behaviour(cold_s=args.cold_s, l2_s=args.l2_s, warm_s=args.warm_s)
    with FakeCluster(len(ports), behaviour, ports) as cluster:
        print("fake servers (one shared L2):", " ".join(cluster.urls), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
