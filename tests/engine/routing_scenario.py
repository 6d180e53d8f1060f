"""The real-router scenario: two engines of the example's standalone endpoint, kvtier's router in front, per strategy.

It runs as a phase on the session's shared engines (lmcache_replicas.py): A and B run kvtier's standalone rendering
(LMCache L1 + the shared L2 folder, as in scenario.py) plus `--enable-scale-out`. For each strategy kvtier can render
in standalone mode, the router starts with kvtier's flags (routers.localize) and three workloads run through it, each
with fresh token ids (drawn from this phase's seed and the strategy) so no strategy inherits another's cache, nor
another phase's:
- `prefix` (sequential): 3 prefixes of PREFIX_TOKENS, 4 interleaved rounds, each a new short suffix, no header;
- `session` (sequential): 5 sessions of fresh prompts, 3 rounds, header SESSION_HEADER;
- `chat` (concurrent): USERS users share a SYSTEM_TOKENS system prompt, each with its own document; ROUNDS turns, each
  turn the whole conversation so far plus TURN_TOKENS new tokens, all users at once, with SESSION_HEADER.
Which engine served a sequential request: the engine whose `vllm:request_success_total` moved. Tiers over the `chat`
workload: per engine, `vllm:prefix_cache_hits_total` (L0, vLLM's own prefix cache), `vllm:external_prefix_cache_hits_total`
(L1/L2, what LMCache loaded), `vllm:prompt_tokens_total`. TTFT: the time to a `max_tokens: 1` answer through the router.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from kvtier import serving
from kvtier.bench.testserver import free_port
from kvtier.k8s.router import router_args
from kvtier.planner.pool_routing import endpoint_knobs
from kvtier.rules import load_checked
from kvtier.stats import percentile
from kvtier.versions import ROUTER_POLICY
from tests.engine import render
from tests.engine.engines import Engine, EngineError
from tests.engine.routers import Router, broken, localize, running
from tests.engine.scenario import ENDPOINT, ENV_NAME, LOB, REPO

if TYPE_CHECKING:
    from tests.engine.lmcache_replicas import Replicas

PREFIX_TOKENS = 600
SUFFIX_TOKENS = 24
PREFIXES, PREFIX_ROUNDS = 3, 4
SESSIONS, SESSION_ROUNDS = 5, 3  # odd, so round robin would move a session between rounds
SESSION_PROMPT_TOKENS = 64
SYSTEM_TOKENS, DOC_TOKENS, TURN_TOKENS = 256, 384, 48
USERS, ROUNDS = 6, 4
BENCH_USERS = 3  # odd, so round robin would move a user between rounds
REQUEST_TIMEOUT_S = 300.0
STORE_SETTLE_S = 2.0
SUCCESS = "vllm:request_success_total"
L0_HITS = "vllm:prefix_cache_hits_total"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
# vllm-router 0.1.17's cache_aware defaults (its router_args.py): KVTIER_ROUTER_BREAK=knobs renders poolaware with them.
UPSTREAM_KNOBS: dict[str, Any] = {"cache_threshold": 0.3, "balance_abs_threshold": 64, "balance_rel_threshold": 1.5}


@dataclass
class Sent:
    """One request through the router and what came back."""

    key: str  # prefix, session or user id
    round: int
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: float
    shared_tokens: int = 0  # leading tokens an earlier request of the same key already sent
    engine: str | None = None  # sequential workloads only


@dataclass
class StrategyRun:
    strategy: str
    policy: str  # the --policy kvtier rendered
    args: list[str]  # the router's argv after localize
    prefix: list[Sent] = field(default_factory=list)
    session: list[Sent] = field(default_factory=list)
    chat: list[Sent] = field(default_factory=list)
    chat_tiers: dict[str, float] = field(default_factory=dict)  # l0, external, prompt (token counts)
    chat_per_engine: dict[str, float] = field(default_factory=dict)  # requests each engine finished
    router_ready_s: float = 0.0
    bench: list[dict[str, Any]] = field(default_factory=list)  # `kvtier bench` records through the router
    probes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def ttft_ms(self, q: float) -> float:
        value = percentile([s.ttft_ms for s in self.chat], q)
        if value is None:
            raise ValueError(f"{self.strategy}: no chat requests to take a percentile of")
        return value


@dataclass
class RoutingObserved:
    runs: dict[str, StrategyRun] = field(default_factory=dict)
    engines: tuple[str, ...] = ("A", "B")
    engine_urls: dict[str, str] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    block_tokens: int = 0  # vLLM-CPU's block size (the engines' --block-size as run): L0 hits come in blocks
    chunk_tokens: int = 0  # the endpoint's `cache.chunk_size` in the config: L1/L2 hits come in whole chunks


def tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(3, 2048) for _ in range(count)]


def post(router: Router, served: str, prompt: list[int], header: str | None) -> tuple[dict[str, Any], float]:
    headers = {serving.SESSION_HEADER: header} if header else {}
    body = {"model": served, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    started = time.perf_counter()
    response = httpx.post(f"{router.url}/v1/completions", json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise router.fail(f"POST /v1/completions answered {response.status_code}: {response.text[:300]}")
    answer: dict[str, Any] = response.json()
    return answer, elapsed


def cached(answer: dict[str, Any]) -> int:
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def counters(engines: dict[str, Engine], name: str) -> dict[str, float]:
    return {key: engine.metric(name) for key, engine in engines.items()}


def sequential(
    router: Router,
    engines: dict[str, Engine],
    served: str,
    key: str,
    rnd: int,
    prompt: list[int],
    header: str | None,
    shared: int = 0,
) -> Sent:
    before = counters(engines, SUCCESS)
    answer, ms = post(router, served, prompt, header)
    after = counters(engines, SUCCESS)
    moved = [k for k in engines if after[k] > before[k]]
    if len(moved) != 1:
        raise EngineError(f"request {key}/{rnd}: {len(moved)} engines counted it ({moved}); expected exactly one")
    return Sent(key, rnd, len(prompt), cached(answer), ms, shared, moved[0])


def run_strategy(
    strategy: str,
    args: list[str],
    python: str,
    site: Path,
    workdir: Path,
    engines: dict[str, Engine],
    served: str,
    seed: str,
) -> StrategyRun:
    policy = args[args.index("--policy") + 1]
    run = StrategyRun(strategy, policy, args)
    rng = random.Random(f"{seed}:{strategy}")  # fresh tokens per phase and strategy: no inherited cache
    started = time.monotonic()
    with running(Router(python, site, args, workdir / f"router-{strategy}.log")) as router:
        run.router_ready_s = router.ready_s or 0.0
        run.probes = dict(router.probes or {})
        prefixes = [tokens(rng, PREFIX_TOKENS) for _ in range(PREFIXES)]
        for rnd in range(PREFIX_ROUNDS):
            for i, prefix in enumerate(prefixes):
                prompt = prefix + tokens(rng, SUFFIX_TOKENS)
                shared = PREFIX_TOKENS if rnd else 0
                run.prefix.append(sequential(router, engines, served, f"p{i}", rnd, prompt, None, shared))
        for rnd in range(SESSION_ROUNDS):
            for i in range(SESSIONS):
                prompt = tokens(rng, SESSION_PROMPT_TOKENS)
                run.session.append(sequential(router, engines, served, f"s{i}", rnd, prompt, f"{strategy}-s{i}"))
        run_chat(run, router, engines, served, rng)
        run.bench = run_bench(router, workdir / f"bench-{strategy}")
    run.seconds = time.monotonic() - started
    return run


def run_chat(run: StrategyRun, router: Router, engines: dict[str, Engine], served: str, rng: random.Random) -> None:
    system = tokens(rng, SYSTEM_TOKENS)
    history = {f"u{i}": system + tokens(rng, DOC_TOKENS) for i in range(USERS)}
    sent: dict[str, list[int]] = {}  # each user's previous prompt (the engines never saw the appended answer)
    before = {name: counters(engines, name) for name in (L0_HITS, EXTERNAL_HITS, PROMPT_TOKENS, SUCCESS)}
    with ThreadPoolExecutor(max_workers=USERS) as pool:
        for rnd in range(ROUNDS):
            prompts = {user: past + tokens(rng, TURN_TOKENS) for user, past in history.items()}
            futures = {
                user: pool.submit(post, router, served, prompt, f"{run.strategy}-{user}")
                for user, prompt in prompts.items()
            }
            for user, future in futures.items():
                answer, ms = future.result(timeout=REQUEST_TIMEOUT_S + 30)
                shared = len(sent[user]) if user in sent else 0
                run.chat.append(Sent(user, rnd, len(prompts[user]), cached(answer), ms, shared))
                sent[user] = prompts[user]
                history[user] = prompts[user] + tokens(rng, 8)  # the answer joins the conversation
            time.sleep(STORE_SETTLE_S)  # LMCache writes L2 after the forward pass
    after = {name: counters(engines, name) for name in (L0_HITS, EXTERNAL_HITS, PROMPT_TOKENS, SUCCESS)}

    def delta(name: str) -> float:
        return sum(after[name][k] - before[name][k] for k in engines)

    run.chat_tiers = {"l0": delta(L0_HITS), "external": delta(EXTERNAL_HITS), "prompt": delta(PROMPT_TOKENS)}
    run.chat_per_engine = {k: after[SUCCESS][k] - before[SUCCESS][k] for k in engines}


def run_bench(router: Router, out: Path) -> list[dict[str, Any]]:
    """`kvtier bench shared-prefix` through the router, one request at a time, with --router-metrics-url: the
    records must name the replica that served each request."""
    cmd = [
        sys.executable, "-m", "kvtier", "bench", "shared-prefix", "--url", router.url, "--api", "completions",
        "--users", str(BENCH_USERS), "--rounds", "3", "--concurrency", "1", "--qps", "50",
        "--system-tokens", "64", "--user-tokens", "64", "--question-tokens", "16", "--max-tokens", "2",
        "--router-metrics-url", f"http://127.0.0.1:{router.metrics_port}", "--no-metrics",
        "--out", str(out), "--no-plots", "--no-progress", "--timeout-s", "120",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, cwd=REPO)
    if done.returncode != 0:
        raise EngineError(
            f"kvtier bench through the router exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}"
        )
    result: dict[str, Any] = json.loads((out / "result.json").read_text(encoding="utf-8"))
    requests: list[dict[str, Any]] = result["requests"]
    return requests


def rendered_router_args(strategy: str, break_what: str | None) -> list[str]:
    config = load_checked(REPO / "config", ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT).model_copy(update={"routing": strategy})
    knobs = endpoint_knobs(config, LOB, endpoint)  # what the LOB stack renders (poolaware only)
    if knobs is not None and break_what == "knobs":
        knobs = replace(knobs, **UPSTREAM_KNOBS)
    with broken(break_what):
        return router_args(LOB, endpoint, knobs)


def routing_scenario(
    group: Replicas,
    site: Path,
    workdir: Path,
    break_what: str | None,
    strategies: tuple[str, ...] = tuple(ROUTER_POLICY),
) -> RoutingObserved:
    total = time.monotonic()
    observed = RoutingObserved()
    seed = group.phase("real-router")
    a, b = group.engines["A"], group.engines["B"]
    block = a.launch.args[a.launch.args.index("--block-size") + 1] if "--block-size" in a.launch.args else "16"
    observed.block_tokens = int(block)
    observed.chunk_tokens = group.endpoint.cache.chunk_size
    engines = {"A": a, "B": b}
    observed.engine_urls = {key: engine.url for key, engine in engines.items()}
    served = group.endpoint.model.id
    for strategy in strategies:
        args = localize(rendered_router_args(strategy, break_what), [a.url, b.url], free_port(), free_port())
        observed.runs[strategy] = run_strategy(strategy, args, group.python, site, workdir, engines, served, seed)
    observed.timings_s["scenario"] = time.monotonic() - total
    return observed
