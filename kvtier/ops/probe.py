"""`kvtier verify --probe`: prove a cross-pod L2 hit on the live cluster, per endpoint with an L2.

For each such endpoint: two ready pods on different nodes (A, B); one salted prompt of about PROMPT_WORDS words
(at least as many tokens) to A; wait until A's LMCache reports L2 writes (its store is asynchronous); the same prompt
to B; then B's counters say whether the prefix came from L2 (`lmcache:num_remote_read_bytes_total`,
`vllm:external_prefix_cache_hits_total`). An endpoint on vLLM's own connector (`cache.connector: vllm`) is judged by
vLLM's counters alone: its `fs` tier's write and read bytes (`vllm:kv_offload_tiering_*{tier="1:fs"}`) and the
external prefix-cache queries and hits (`Signals`). LMCache publishes its counters from a thread every 10 s (LMCache 0.4.3,
docs/references.md), so both waits poll until the counters have caught up, within bounds. Read-only apart from the
two requests; bounded time per endpoint. The pods are reached through `PodAccess` (kvtier.ops.portforward for a cluster, plain URLs in tests); the HTTP
side is `kvtier bench`'s client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import aiohttp

from kvtier.bench.client import probe as models_probe
from kvtier.bench.client import send
from kvtier.bench.http import new_client
from kvtier.bench.metrics import Sample, scrape, total
from kvtier.bench.prompts import PromptMaker, new_salt
from kvtier.bench.records import Request, request_body
from kvtier.errors import ExitCode
from kvtier.k8s.observability import metrics as m

PROMPT_WORDS = 2000  # words: every tokenizer makes at least one token of each, so >= 2,000 tokens
LMCACHE_STATS_INTERVAL_S = 10.0  # LMCache 0.4.3 publishes its Prometheus counters every 10 s (docs/references.md)
STORE_WAIT_S = 30.0  # LMCache's asynchronous store plus one publication: how long A may take to show its L2 writes
SETTLE_S = 2 * LMCACHE_STATS_INTERVAL_S + 5  # how long B's LMCache counters may take to show its lookup and L2 reads
REQUEST_TIMEOUT_S = 120.0
ENDPOINT_BUDGET_S = 300.0  # everything for one endpoint, pod lookup to the last scrape
POLL_S = 0.5
WRITE_BYTES = m.LMCACHE_REMOTE_WRITE_BYTES
READ_BYTES = m.LMCACHE_REMOTE_READ_BYTES
LMCACHE_HITS = m.LMCACHE_HIT_TOKENS
LMCACHE_REQUESTED = m.LMCACHE_REQUESTED_TOKENS
LOOKUP_TOKENS = m.LMCACHE_LOOKUP_TOKENS
LOOKUP_HITS = m.LMCACHE_LOOKUP_HITS
EXTERNAL_HITS = m.VLLM_EXTERNAL_PREFIX_CACHE_HITS


@dataclass(frozen=True)
class Signals:
    """The counters one connector exposes: L2 write and read bytes (with label matches), lookups and their hits."""

    connector: str
    write_bytes: str
    read_bytes: str
    lookup_tokens: str
    lookup_hits: str
    match: tuple[tuple[str, str], ...] = ()  # labels of the L2 byte counters

    def delta(self, before: list[Sample], after: list[Sample], name: str) -> float | None:
        match = dict(self.match) if name in (self.write_bytes, self.read_bytes) else {}
        a, b = total(before, name, **match), total(after, name, **match)
        return None if a is None or b is None else b - a


LMCACHE_SIGNALS = Signals("lmcache", WRITE_BYTES, READ_BYTES, LOOKUP_TOKENS, LOOKUP_HITS)
VLLM_SIGNALS = Signals(
    "vllm",
    m.VLLM_OFFLOAD_TIER_WRITE_BYTES,
    m.VLLM_OFFLOAD_TIER_READ_BYTES,
    m.VLLM_EXTERNAL_PREFIX_CACHE_QUERIES,
    EXTERNAL_HITS,
    ((m.VLLM_OFFLOAD_TIER_LABEL, m.VLLM_OFFLOAD_FS_TIER),),
)
SIGNALS = {s.connector: s for s in (LMCACHE_SIGNALS, VLLM_SIGNALS)}


@dataclass(frozen=True)
class ProbeTiming:
    """The probe's bounded waits (tests shorten them; the defaults follow LMCache's publication interval)."""

    store_wait_s: float = STORE_WAIT_S
    settle_s: float = SETTLE_S


@dataclass(frozen=True)
class Pod:
    name: str
    node: str
    ready: bool


class UnreachableError(Exception):
    """The cluster or a pod cannot be reached: exit 3."""


class PodAccess(Protocol):
    """How the probe finds an endpoint's pods and reaches one of them (a base URL while the context is open)."""

    def pods(self, lob: str, endpoint: str) -> list[Pod]: ...

    def connect(self, lob: str, pod: Pod) -> AbstractAsyncContextManager[str]: ...


@dataclass
class ProbeResult:
    lob: str
    endpoint: str
    outcome: str  # hit | miss | unreachable
    message: str
    pod_a: str | None = None
    pod_b: str | None = None
    hit_tokens: int = 0  # tokens B took from outside its GPU cache (vLLM's external prefix cache hits)
    l2_read_bytes: int = 0
    a_write_bytes: int = 0
    seconds: float = 0.0
    counters: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeReport:
    environment: str
    results: tuple[ProbeResult, ...]

    @property
    def exit_code(self) -> ExitCode:
        outcomes = {r.outcome for r in self.results}
        if "unreachable" in outcomes:
            return ExitCode.UNAVAILABLE
        return ExitCode.OK if outcomes <= {"hit"} else ExitCode.PROBLEMS

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "ok": self.exit_code == ExitCode.OK,
            "results": [asdict(r) for r in self.results],
        }


def pick_pair(pods: Sequence[Pod]) -> tuple[Pod, Pod] | None:
    """Two ready pods on different nodes (the first in name order), or None."""
    ready = sorted((p for p in pods if p.ready), key=lambda p: p.name)
    for a in ready:
        for b in ready:
            if a.node != b.node:
                return a, b
    return None


def probe_prompt(salt: str, words: int = PROMPT_WORDS) -> str:
    """A salted prompt: its first words are new on every run, so no cache anywhere holds it before A."""
    return PromptMaker(0, salt).sweep_prompt(words)


async def _counters(client: aiohttp.ClientSession, url: str) -> list[Sample]:
    scraped = await scrape(client, url, timeout_s=REQUEST_TIMEOUT_S)
    if scraped.error is not None:
        raise UnreachableError(f"{url}/metrics: {scraped.error}")
    return scraped.samples


def _delta(before: list[Sample], after: list[Sample], name: str) -> float | None:
    a, b = total(before, name), total(after, name)
    return None if a is None or b is None else b - a


async def _complete(client: aiohttp.ClientSession, url: str, model: str, prompt: str, run: str) -> None:
    body = request_body("completions", model, prompt, 1)
    record = await send(client, Request(run, url, "completions", body, 0), timeout_s=REQUEST_TIMEOUT_S, origin=0.0)
    if record.error_kind == "connect":
        raise UnreachableError(record.error or f"cannot connect to {url}")
    if not record.ok:
        raise RuntimeError(f"the request to {url} failed: {record.error}")


async def _wait_for_store(
    client: aiohttp.ClientSession, url: str, before: list[Sample], wait_s: float, signals: Signals = LMCACHE_SIGNALS
) -> float:
    """A's L2 write bytes since `before`, once they stop growing (or when `wait_s` runs out)."""
    deadline = time.monotonic() + wait_s
    written = 0.0
    while time.monotonic() < deadline:
        now = signals.delta(before, await _counters(client, url), signals.write_bytes) or 0.0
        if now > 0 and now == written:
            return now  # two polls without growth: the store has finished
        written = now
        await asyncio.sleep(POLL_S)
    return written


async def _wait_for_lookup(
    client: aiohttp.ClientSession, url: str, before: list[Sample], wait_s: float, signals: Signals = LMCACHE_SIGNALS
) -> list[Sample]:
    """B's counters once LMCache has published the request: as soon as they show L2 reads (a hit) or a lookup that
    found nothing (a miss); else (a worker process that publishes its reads later than the scheduler its lookup)
    whatever shows by the end of `wait_s`. Without any LMCache series there is nothing to wait for."""
    deadline = time.monotonic() + wait_s
    while True:
        now = await _counters(client, url)
        looked_up = signals.delta(before, now, signals.lookup_tokens) or 0
        if (
            total(now, signals.lookup_tokens) is None
            or (signals.delta(before, now, signals.read_bytes) or 0) > 0
            or (looked_up > 0 and not signals.delta(before, now, signals.lookup_hits))
            or time.monotonic() >= deadline
        ):
            return now
        await asyncio.sleep(POLL_S)


def _vllm_miss_cause(a_written: float, b_looked_up: float | None, tier_seen: bool) -> str:
    if not tier_seen:
        return (
            "no vllm:kv_offload_tiering_* series of the fs tier on the pods: vLLM's OffloadingConnector runs without "
            "the fs tier; check the --kv-transfer-config (run `kvtier verify`)"
        )
    if a_written <= 0:
        return (
            "pod A wrote nothing to its fs tier: the L2 mount is absent or read-only, or the prompt is shorter than one "
            "vLLM block (the fs tier stores full blocks only); run `kvtier verify`"
        )
    if not b_looked_up:
        return "pod B did not ask its OffloadingConnector for the prompt: its kv-transfer config is off"
    return (
        "pod B asked but read nothing from its fs tier although A wrote: the pods hash differently (PYTHONHASHSEED, "
        "--prefix-caching-hash-algo, --block-size, --model) or use different fs directories (root_dir, identity); "
        "run `kvtier verify`"
    )


def _miss_cause(a_written: float, b_looked_up: float | None, lmcache_seen: bool) -> str:
    if not lmcache_seen:
        return (
            "no lmcache:* series on the pods: LMCache is not loaded or PROMETHEUS_MULTIPROC_DIR is unset; "
            "check the kv-transfer config"
        )
    if a_written <= 0:
        return (
            "pod A wrote nothing to L2: LMCACHE_REMOTE_URL is missing or wrong, the L2 mount is absent, or the prompt "
            "is shorter than one LMCache chunk (chunk alignment); run `kvtier verify`"
        )
    if not b_looked_up:
        return "pod B did not ask LMCache for the prompt: its kv-transfer config is off (run `kvtier verify`)"
    return (
        "pod B asked LMCache but read nothing from L2 although A wrote: the pods hash differently (PYTHONHASHSEED, "
        "model name, chunk size) or use different L2 directories (LMCACHE_REMOTE_URL, identity); run `kvtier verify`"
    )


async def probe_pair(
    lob: str,
    endpoint: str,
    url_a: str,
    url_b: str,
    *,
    salt: str | None = None,
    timing: ProbeTiming = ProbeTiming(),
    signals: Signals = LMCACHE_SIGNALS,
) -> ProbeResult:
    """The probe between two reachable pods (base URLs), judged by the counters of the endpoint's connector."""
    start = time.monotonic()
    result = ProbeResult(lob, endpoint, "miss", "")
    async with new_client(REQUEST_TIMEOUT_S) as client:
        listed = await models_probe(client, url_a, timeout_s=REQUEST_TIMEOUT_S)
        if not listed.answered:
            raise UnreachableError(f"{url_a}: {listed.error}")
        if not listed.models:
            result.message = f"{url_a} lists no model ({listed.error or 'empty /v1/models'})"
            return result
        prompt = probe_prompt(salt or new_salt())
        before_a, before_b = await _counters(client, url_a), await _counters(client, url_b)
        await _complete(client, url_a, listed.models[0], prompt, "probe-a")
        written = await _wait_for_store(client, url_a, before_a, timing.store_wait_s, signals)
        await _complete(client, url_b, listed.models[0], prompt, "probe-b")
        after_b = await _wait_for_lookup(client, url_b, before_b, timing.settle_s, signals)
    if signals.connector == "vllm":
        return _judge_vllm(result, before_b, after_b, written, signals, start)
    read = _delta(before_b, after_b, READ_BYTES)
    external = _delta(before_b, after_b, EXTERNAL_HITS)
    lmcache_hits = _delta(before_b, after_b, LMCACHE_HITS)
    requested = _delta(before_b, after_b, LMCACHE_REQUESTED)
    looked_up = _delta(before_b, after_b, LOOKUP_TOKENS)
    result.counters = {
        READ_BYTES: read,
        EXTERNAL_HITS: external,
        LMCACHE_HITS: lmcache_hits,
        LMCACHE_REQUESTED: requested,
        LOOKUP_TOKENS: looked_up,
        LOOKUP_HITS: _delta(before_b, after_b, LOOKUP_HITS),
    }
    result.a_write_bytes = int(written)
    result.l2_read_bytes = int(read or 0)
    result.hit_tokens = int(external if external is not None else lmcache_hits or 0)
    result.seconds = round(time.monotonic() - start, 3)
    if result.l2_read_bytes > 0 and result.hit_tokens > 0:
        result.outcome = "hit"
        result.message = f"pod B took {result.hit_tokens} prompt tokens from L2 ({result.l2_read_bytes} bytes read)"
    else:
        result.message = _miss_cause(written, looked_up, total(after_b, LOOKUP_TOKENS) is not None)
    return result


def _judge_vllm(
    result: ProbeResult, before_b: list[Sample], after_b: list[Sample], written: float, signals: Signals, start: float
) -> ProbeResult:
    """A hit: B read from its fs tier and vLLM counted the tokens as external prefix-cache hits."""
    read = signals.delta(before_b, after_b, signals.read_bytes)
    hits = signals.delta(before_b, after_b, signals.lookup_hits)
    looked_up = signals.delta(before_b, after_b, signals.lookup_tokens)
    result.counters = {
        f"{signals.read_bytes}{{{','.join(f'{k}={v!r}' for k, v in signals.match)}}}": read,
        signals.lookup_tokens: looked_up,
        signals.lookup_hits: hits,
    }
    result.a_write_bytes = int(written)
    result.l2_read_bytes = int(read or 0)
    result.hit_tokens = int(hits or 0)
    result.seconds = round(time.monotonic() - start, 3)
    if result.l2_read_bytes > 0 and result.hit_tokens > 0:
        result.outcome = "hit"
        result.message = (
            f"pod B took {result.hit_tokens} prompt tokens from vLLM's fs tier ({result.l2_read_bytes} bytes read)"
        )
    else:
        # A counter with labels appears once it is first counted: every fs-tier lookup counts a query, a read only a hit.
        seen = total(after_b, m.VLLM_OFFLOAD_TIER_CHUNK_QUERIES, **dict(signals.match)) is not None
        result.message = _vllm_miss_cause(written, looked_up, seen)
    return result


async def probe_endpoint(
    access: PodAccess,
    lob: str,
    endpoint: str,
    *,
    timing: ProbeTiming = ProbeTiming(),
    signals: Signals = LMCACHE_SIGNALS,
) -> ProbeResult:
    try:
        pods = access.pods(lob, endpoint)
    except UnreachableError as err:
        return ProbeResult(lob, endpoint, "unreachable", str(err))
    pair = pick_pair(pods)
    if pair is None:
        nodes = sorted({p.node for p in pods if p.ready})
        return ProbeResult(
            lob,
            endpoint,
            "miss",
            f"needs two ready pods on different nodes; found {sum(p.ready for p in pods)} ready on {len(nodes)} "
            "node(s): scale the endpoint to 2+ replicas spread over GPU nodes",
        )
    a, b = pair
    try:
        async with asyncio.timeout(ENDPOINT_BUDGET_S):
            async with access.connect(lob, a) as url_a, access.connect(lob, b) as url_b:
                result = await probe_pair(lob, endpoint, url_a, url_b, timing=timing, signals=signals)
    except UnreachableError as err:
        return ProbeResult(lob, endpoint, "unreachable", str(err), a.name, b.name)
    except TimeoutError:
        return ProbeResult(lob, endpoint, "miss", f"no result within {ENDPOINT_BUDGET_S:g} s", a.name, b.name)
    except RuntimeError as err:
        return ProbeResult(lob, endpoint, "miss", str(err), a.name, b.name)
    result.pod_a, result.pod_b = a.name, b.name
    return result


async def probe_all(
    environment: str,
    targets: Sequence[tuple[str, str]],
    access: PodAccess,
    *,
    timing: ProbeTiming = ProbeTiming(),
    connectors: Mapping[tuple[str, str], str] | None = None,
) -> ProbeReport:
    """Probe every (lob, endpoint) in turn (one at a time: the requests must not overlap on a pod); `connectors`
    names an endpoint's `cache.connector` when it is not LMCache's."""
    chosen = connectors or {}
    results = [
        await probe_endpoint(access, lob, ep, timing=timing, signals=SIGNALS[chosen.get((lob, ep), "lmcache")])
        for lob, ep in targets
    ]
    return ProbeReport(environment, tuple(results))
