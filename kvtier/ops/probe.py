"""`kvtier verify --probe`: prove a cross-pod L2 hit on the live cluster, per endpoint with an L2.

For each such endpoint: two ready pods on different nodes (A, B); one salted prompt of about PROMPT_WORDS words
(at least as many tokens) to A; wait until A's connector reports L2 writes (its store is asynchronous); the same
prompt to B; then B's counters say whether the prefix came from L2. Which counters is the connector's (its `hits`,
kvtier/connectors/): LMCache's `lmcache:num_remote_read_bytes_total` and `vllm:external_prefix_cache_hits_total`, or
on vLLM's own connector (`cache.connector: vllm`) its `fs` tier's write and read bytes
(`vllm:kv_offload_tiering_*{tier="1:fs"}`) and the external prefix-cache queries and hits. LMCache publishes its
counters from a thread every 10 s (LMCache 0.4.3, docs/references.md), so both waits poll until the counters have
caught up, within bounds. Read-only apart from the two requests; bounded time per endpoint. The pods are reached
through `PodAccess` (kvtier.ops.portforward for a cluster, plain URLs in tests); the HTTP side is `kvtier bench`'s
client.
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
from kvtier.connectors import DEFAULT_CONNECTOR, connector_named
from kvtier.connectors.base import Connector, HitMetrics, Series
from kvtier.errors import ExitCode

PROMPT_WORDS = 2000  # words: every tokenizer makes at least one token of each, so >= 2,000 tokens
LMCACHE_STATS_INTERVAL_S = 10.0  # LMCache 0.4.3 publishes its Prometheus counters every 10 s (docs/references.md)
STORE_WAIT_S = 30.0  # LMCache's asynchronous store plus one publication: how long A may take to show its L2 writes
SETTLE_S = 2 * LMCACHE_STATS_INTERVAL_S + 5  # how long B's LMCache counters may take to show its lookup and L2 reads
REQUEST_TIMEOUT_S = 120.0
ENDPOINT_BUDGET_S = 300.0  # everything for one endpoint, pod lookup to the last scrape
POLL_S = 0.5


def _delta(before: list[Sample], after: list[Sample], series: Series) -> float | None:
    labels = dict(series.labels)
    a, b = total(before, series.name, **labels), total(after, series.name, **labels)
    return None if a is None or b is None else b - a


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


async def _complete(client: aiohttp.ClientSession, url: str, model: str, prompt: str, run: str) -> None:
    body = request_body("completions", model, prompt, 1)
    record = await send(client, Request(run, url, "completions", body, 0), timeout_s=REQUEST_TIMEOUT_S, origin=0.0)
    if record.error_kind == "connect":
        raise UnreachableError(record.error or f"cannot connect to {url}")
    if not record.ok:
        raise RuntimeError(f"the request to {url} failed: {record.error}")


async def _wait_for_store(
    client: aiohttp.ClientSession, url: str, before: list[Sample], wait_s: float, hits: HitMetrics
) -> float:
    """A's L2 write bytes since `before`, once they stop growing (or when `wait_s` runs out)."""
    deadline = time.monotonic() + wait_s
    written = 0.0
    while time.monotonic() < deadline:
        now = _delta(before, await _counters(client, url), hits.l2_write_bytes) or 0.0
        if now > 0 and now == written:
            return now  # two polls without growth: the store has finished
        written = now
        await asyncio.sleep(POLL_S)
    return written


async def _wait_for_lookup(
    client: aiohttp.ClientSession, url: str, before: list[Sample], wait_s: float, hits: HitMetrics
) -> list[Sample]:
    """B's counters once the connector has published the request: as soon as they show L2 reads (a hit) or a lookup
    that found nothing (a miss); else (a worker process that publishes its reads later than the scheduler its lookup)
    whatever shows by the end of `wait_s`. Without any lookup series there is nothing to wait for."""
    deadline = time.monotonic() + wait_s
    while True:
        now = await _counters(client, url)
        looked_up = _delta(before, now, hits.lookup_tokens) or 0
        if (
            total(now, hits.lookup_tokens.name, **dict(hits.lookup_tokens.labels)) is None
            or (_delta(before, now, hits.l2_read_bytes) or 0) > 0
            or (looked_up > 0 and not _delta(before, now, hits.lookup_hits))
            or time.monotonic() >= deadline
        ):
            return now
        await asyncio.sleep(POLL_S)


async def probe_pair(
    lob: str,
    endpoint: str,
    url_a: str,
    url_b: str,
    *,
    salt: str | None = None,
    timing: ProbeTiming = ProbeTiming(),
    connector: Connector = DEFAULT_CONNECTOR,
) -> ProbeResult:
    """The probe between two reachable pods (base URLs), judged by the counters of the endpoint's connector: a hit
    when B read from L2 and took tokens from outside its GPU cache."""
    start = time.monotonic()
    hits = connector.hits
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
        written = await _wait_for_store(client, url_a, before_a, timing.store_wait_s, hits)
        await _complete(client, url_b, listed.models[0], prompt, "probe-b")
        after_b = await _wait_for_lookup(client, url_b, before_b, timing.settle_s, hits)
    read = _delta(before_b, after_b, hits.l2_read_bytes)
    taken = next((d for s in hits.hit_tokens if (d := _delta(before_b, after_b, s)) is not None), None)
    result.counters = {s.key: _delta(before_b, after_b, s) for s in hits.reported}
    result.a_write_bytes = int(written)
    result.l2_read_bytes = int(read or 0)
    result.hit_tokens = int(taken or 0)
    result.seconds = round(time.monotonic() - start, 3)
    if result.l2_read_bytes > 0 and result.hit_tokens > 0:
        result.outcome = "hit"
        result.message = (
            f"pod B took {result.hit_tokens} prompt tokens from {hits.l2_name} ({result.l2_read_bytes} bytes read)"
        )
    else:
        loaded = total(after_b, hits.loaded.name, **dict(hits.loaded.labels)) is not None
        result.message = connector.probe_miss_cause(written, _delta(before_b, after_b, hits.lookup_tokens), loaded)
    return result


async def probe_endpoint(
    access: PodAccess,
    lob: str,
    endpoint: str,
    *,
    timing: ProbeTiming = ProbeTiming(),
    connector: Connector = DEFAULT_CONNECTOR,
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
                result = await probe_pair(lob, endpoint, url_a, url_b, timing=timing, connector=connector)
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
    names an endpoint's `cache.connector` when it is not the default one."""
    chosen = connectors or {}
    results = [
        await probe_endpoint(
            access, lob, ep, timing=timing, connector=connector_named(chosen.get((lob, ep), DEFAULT_CONNECTOR.name))
        )
        for lob, ep in targets
    ]
    return ProbeReport(environment, tuple(results))
