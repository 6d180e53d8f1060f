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

`--isolation` (issue 34) checks that a request is never served KV cached under another `cache_salt`: a fresh prompt
with salt X to pod A (cold), again with X to pod B (it must hit: else nothing below would prove anything), then with
salt Y to B and with no salt to A: neither may take a cached token, on any tier (B holds X's KV in its GPU and L2, A
in its GPU, CPU and L2). `--adapter NAME` (issue 35) does the same for LoRA adapters: NAME to A, NAME to B (a
cross-replica L2 hit), then another adapter of the endpoint (or the base model) to B, and the base model to A when
that other was an adapter: no cached token. Both judge each request by its own `usage.prompt_tokens_details.
cached_tokens` (vLLM counts the tokens of its GPU prefix cache and its KV connector's there; kvtier renders
`--enable-prompt-tokens-details`), never by fleet counters that real traffic also moves: the counters only pace the
wait for A's asynchronous L2 store. Neither connector reports a request's hits anywhere else (LMCache only logs them).
A salt the engine refuses (not a string, longer than it accepts) is reported with the engine's own message, exit 2.
"""

from __future__ import annotations

import asyncio
import json
import secrets
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
from kvtier.config.endpoint import Endpoint
from kvtier.connectors import DEFAULT_CONNECTOR, connector_for, connector_named
from kvtier.connectors.base import Connector, HitMetrics, Series
from kvtier.errors import ExitCode

PROMPT_WORDS = 2000  # words: every tokenizer makes at least one token of each, so >= 2,000 tokens
LMCACHE_STATS_INTERVAL_S = 10.0  # LMCache 0.4.3 publishes its Prometheus counters every 10 s (docs/references.md)
STORE_WAIT_S = 30.0  # LMCache's asynchronous store plus one publication: how long A may take to show its L2 writes
SETTLE_S = 2 * LMCACHE_STATS_INTERVAL_S + 5  # how long B's LMCache counters may take to show its lookup and L2 reads
REQUEST_TIMEOUT_S = 120.0
ENDPOINT_BUDGET_S = 300.0  # everything for one endpoint, pod lookup to the last scrape
POLL_S = 0.5
PASSED = frozenset({"hit", "isolated"})  # the outcomes of a check that holds


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
    outcome: str  # hit | isolated (the checks passed) | miss | leak (problems) | refused (bad input) | unreachable
    message: str
    pod_a: str | None = None
    pod_b: str | None = None
    hit_tokens: int = 0  # tokens B took from outside its GPU cache (vLLM's external prefix cache hits)
    l2_read_bytes: int = 0
    a_write_bytes: int = 0
    seconds: float = 0.0
    counters: dict[str, float | None] = field(default_factory=dict)
    check: str = "l2"  # l2 (cross-pod hit) | isolation (cache_salt) | adapter (LoRA adapters)
    requests: list[dict[str, Any]] = field(default_factory=list)  # isolation and adapter checks: each request seen


@dataclass(frozen=True)
class ProbeReport:
    environment: str
    results: tuple[ProbeResult, ...]

    @property
    def exit_code(self) -> ExitCode:
        outcomes = {r.outcome for r in self.results}
        if "unreachable" in outcomes:
            return ExitCode.UNAVAILABLE
        if "refused" in outcomes:
            return ExitCode.USAGE
        return ExitCode.OK if outcomes <= PASSED else ExitCode.PROBLEMS

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
            or (hits.load_failures is not None and (_delta(before, now, hits.load_failures) or 0) > 0)
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
    elif hits.load_failures is not None and (failed := _delta(before_b, after_b, hits.load_failures) or 0) > 0:
        result.counters[hits.load_failures.key] = failed
        result.message = connector.probe_load_failure_cause(failed)
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


# ---- isolation (cache_salt, issue 34) and adapters (issue 35): judged per request -----------------------------------


class RefusedError(Exception):
    """The engine refused a probe request (HTTP 4xx): its own message, unchanged."""


@dataclass(frozen=True)
class Check:
    """One isolation or adapter check of an endpoint: `adapter` None checks salts; else the adapter whose KV must be
    shared across replicas and `others` the models (another adapter, the base model) that must never read it."""

    lob: str
    endpoint: Endpoint
    adapter: str | None = None
    others: tuple[str, ...] = ()
    salt: Any = None  # the isolation check's salt X (None: a fresh random one); passed to the engine as given

    @property
    def kind(self) -> str:
        return "isolation" if self.adapter is None else "adapter"


@dataclass(frozen=True)
class Asked:
    """One request of a check and what it took from the caches."""

    step: str  # e.g. "salt Y", "adapter support-v2"
    pod: str
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens; None: the engine does not report it
    prompt_tokens: int | None


def random_salt() -> str:
    """A probe salt: printable, no character vLLM refuses in a salt (`@`, `/`, `\\`, NUL), well under its limit."""
    return f"kvtier-probe-{secrets.token_hex(8)}"


async def _ask(client: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int | None, int | None]:
    """POST one completion (not streamed) and return (cached tokens, prompt tokens) from its `usage`. A refusal
    (HTTP 4xx) raises RefusedError with the engine's own message; a pod that cannot be reached, UnreachableError."""
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            async with client.post(f"{url}/v1/completions", json=body) as response:
                text = await response.text()
                status = response.status
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as err:
        raise UnreachableError(f"cannot connect to {url}: {err}") from None
    except (TimeoutError, aiohttp.ClientError) as err:
        raise RuntimeError(f"the request to {url} got no answer: {type(err).__name__} {err}") from None
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if status >= 400:
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise RefusedError(f"HTTP {status}: {message if isinstance(message, str) else text.strip()}")
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not isinstance(usage, dict):
        return None, None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = usage.get("prompt_tokens")
    return (
        int(cached) if isinstance(cached, int) else None,
        int(prompt) if isinstance(prompt, int) else None,
    )


def _body(model: str, prompt: str, salt: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    return body


async def _served_model(client: aiohttp.ClientSession, url: str, endpoint: Endpoint) -> tuple[str, ...]:
    """The models pod A lists (its base model first, then its adapters, as vLLM lists them)."""
    listed = await models_probe(client, url, timeout_s=REQUEST_TIMEOUT_S)
    if not listed.answered:
        raise UnreachableError(f"{url}: {listed.error}")
    if not listed.models:
        raise RuntimeError(f"{url} lists no model ({listed.error or 'empty /v1/models'})")
    base = endpoint.model.id if endpoint.model.id in listed.models else listed.models[0]
    return (base, *(m for m in listed.models if m != base))


def _thousands(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def _judge(check: Check, asked: list[Asked], first: Asked, second: Asked, leaks: list[Asked]) -> tuple[str, str]:
    """(outcome, message) of a check from its requests' own cached-token counts."""
    what = "salt X" if check.adapter is None else f"adapter {check.adapter}"
    silent = [a for a in asked if a.cached_tokens is None]
    if silent:
        return (
            "miss",
            f"pod {silent[0].pod} reports no per-request cached tokens (usage.prompt_tokens_details), so nothing can "
            "be judged: start vLLM with --enable-prompt-tokens-details (kvtier renders it; run `kvtier verify`)",
        )
    key = "cache_salt" if check.adapter is None else "LoRA adapter"
    leaked = [a for a in leaks if a.cached_tokens]
    if leaked:
        shown = "; ".join(f"{a.step} on pod {a.pod} took {_thousands(a.cached_tokens)} cached tokens" for a in leaked)
        cause = connector_for(check.endpoint).isolation_leak_cause(check.endpoint, key)
        return "leak", f"KV crossed the {key}: {shown} of a prompt only {what} had sent; {cause}"
    if not second.cached_tokens:
        where = "another pod" if second.pod != first.pod else "the same pod"
        return (
            "miss",
            f"the second request with {what} ({where}, pod {second.pod}) took no cached tokens, so the 0s of the "
            "others prove nothing; run `kvtier verify --probe` (the cross-pod L2 check) first",
        )
    others = " and ".join(f"{a.step} (pod {a.pod})" for a in leaks)
    return (
        "hit" if check.adapter is not None else "isolated",
        f"{what} took {_thousands(second.cached_tokens)} cached tokens on its second request (pod {second.pod}); "
        f"{others} took 0 of its KV",
    )


async def run_check(
    check: Check, names: tuple[str, str | None], url_a: str, url_b: str | None, *, timing: ProbeTiming
) -> ProbeResult:
    """One isolation or adapter check over pod A and pod B (`url_b` None: A alone, when the endpoint has one ready
    pod; the adapter check needs two). Every request carries the same fresh prompt."""
    start = time.monotonic()
    endpoint = check.endpoint
    connector = connector_for(endpoint)
    name_a, name_b = names[0], names[1] or names[0]
    result = ProbeResult(check.lob, endpoint.name, "miss", "", pod_a=name_a, pod_b=names[1], check=check.kind)
    asked: list[Asked] = []
    async with new_client(REQUEST_TIMEOUT_S) as client:
        models = await _served_model(client, url_a, endpoint)
        base = models[0]
        prompt = probe_prompt(new_salt())
        if check.adapter is None:
            x = random_salt() if check.salt is None else check.salt
            plan = [("salt X", base, x, "a"), ("salt X", base, x, "b"), ("salt Y", base, random_salt(), "b")]
            plan.append(("no salt", base, None, "a"))
        else:
            if check.adapter not in models:
                result.message = (
                    f"pod {name_a} does not serve adapter {check.adapter} (it lists {', '.join(models)}); run "
                    "`kvtier verify` and check the engine's start-up log"
                )
                return result
            step = f"adapter {check.adapter}"
            plan = [(step, check.adapter, None, "a"), (step, check.adapter, None, "b")]
            for n, other in enumerate(check.others):  # the first on B (its L0 and L2 hold the KV), the next on A
                label = "the base model" if other == base else f"adapter {other}"
                plan.append((label, other, None, "b" if n == 0 else "a"))
        urls = {"a": url_a, "b": url_b or url_a}
        pods = {"a": name_a, "b": name_b}
        hits = connector.hits
        wait_store = endpoint.cache.l2 != "none"  # X's chunks must be in L2 before any other request looks
        for n, (step, model, salt, pod) in enumerate(plan):
            before = await _counters(client, urls[pod]) if n == 0 and wait_store else None
            try:
                cached, prompt_tokens = await _ask(client, urls[pod], _body(model, prompt, salt))
            except RefusedError as err:
                result.outcome = "refused"
                result.message = f"the engine on pod {pods[pod]} refused the request with {step}: {err}"
                result.requests = [asdict(a) for a in asked]
                return result
            asked.append(Asked(step, pods[pod], cached, prompt_tokens))
            if before is not None:  # A stores to L2 after it answers: wait for it before B asks
                await _wait_for_store(client, urls[pod], before, timing.store_wait_s, hits)
    result.requests = [asdict(a) for a in asked]
    result.hit_tokens = int(asked[1].cached_tokens or 0)
    result.outcome, result.message = _judge(check, asked, asked[0], asked[1], asked[2:])
    result.seconds = round(time.monotonic() - start, 3)
    return result


async def check_endpoint(access: PodAccess, check: Check, *, timing: ProbeTiming = ProbeTiming()) -> ProbeResult:
    lob, name = check.lob, check.endpoint.name
    try:
        pods = access.pods(lob, name)
    except UnreachableError as err:
        return ProbeResult(lob, name, "unreachable", str(err), check=check.kind)
    if check.adapter is not None and check.endpoint.cache.l2 == "none":
        return ProbeResult(lob, name, "miss", "the endpoint has no L2: its replicas share no KV", check=check.kind)
    # Without an L2 the replicas share nothing: the isolation check runs on one pod (its GPU and CPU caches).
    pair = pick_pair(pods) if check.endpoint.cache.l2 != "none" else None
    ready = sorted((p for p in pods if p.ready), key=lambda p: p.name)
    if pair is None and (check.adapter is not None or not ready):
        nodes = sorted({p.node for p in ready})
        return ProbeResult(
            lob,
            name,
            "miss",
            f"needs {'two ready pods on different nodes' if check.adapter else 'a ready pod'}; found {len(ready)} "
            f"ready on {len(nodes)} node(s): scale the endpoint to 2+ replicas spread over GPU nodes",
            check=check.kind,
        )
    a, b = pair if pair is not None else (ready[0], None)
    try:
        async with asyncio.timeout(ENDPOINT_BUDGET_S):
            async with access.connect(lob, a) as url_a:
                if b is None:
                    return await run_check(check, (a.name, None), url_a, None, timing=timing)
                async with access.connect(lob, b) as url_b:
                    return await run_check(check, (a.name, b.name), url_a, url_b, timing=timing)
    except UnreachableError as err:
        return ProbeResult(lob, name, "unreachable", str(err), a.name, b.name if b else None, check=check.kind)
    except TimeoutError:
        return ProbeResult(
            lob, name, "miss", f"no result within {ENDPOINT_BUDGET_S:g} s", a.name, b.name if b else None,
            check=check.kind,
        )  # fmt: skip
    except RuntimeError as err:
        return ProbeResult(lob, name, "miss", str(err), a.name, b.name if b else None, check=check.kind)


async def check_all(
    environment: str, checks: Sequence[Check], access: PodAccess, *, timing: ProbeTiming = ProbeTiming()
) -> ProbeReport:
    """Every check in turn (one at a time: the requests must not overlap on a pod)."""
    return ProbeReport(environment, tuple([await check_endpoint(access, c, timing=timing) for c in checks]))
