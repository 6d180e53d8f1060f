"""Mixed LoRA adapter traffic through the real router (issue 35, item 4), per routing strategy kvtier renders.

Runs as a phase of the identity scenario on its LMCache pair (two replicas with the adapters, the shared L2 folder,
`--enable-scale-out` for cache_aware's token lookups), so it needs no engine start of its own. For each strategy the
router starts with kvtier's flags (routing_scenario.rendered_router_args, routers.localize) and one sequential
workload runs through it, with fresh token ids per strategy so none inherits another's cache:

- every model (the base model and each adapter) has USERS users; all of them share one SYSTEM_TOKENS system prompt,
  the same text for every model (a platform prompt that every fine-tune gets); each user adds its own document;
- ROUNDS rounds, models interleaved (base, A, B, base, A, B, ...): each request is the system prompt, the user's
  document and a fresh question; the session strategy's header names the user of the model.

The same text under two models has two different KVs, so a request can reuse only its own model's: a router that
matches text alone sends adapter B where adapter A's prefix is, and B finds none of its own KV there (nor anywhere,
the first time). Per request: the engine that served it (the one whose `vllm:request_success_total` moved), L0 hits
(vLLM's prefix cache), connector hits (LMCache's L1 + L2), the router's decision counters that moved (cache_aware's
`prefix_hit` / `prefix_miss`) and the time to the answer. The check (`own_prefix_everywhere`): every request finds
all whole chunks of what its own model sent before, wherever it lands, and never more.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvtier import serving
from kvtier.stats import percentile
from kvtier.versions import ROUTER_POLICY
from tests.engine.engines import Engine, EngineError, metric_sum
from tests.engine.routers import Router, localize, running
from tests.engine.routing_scenario import rendered_router_args

SYSTEM_TOKENS, DOC_TOKENS, QUESTION_TOKENS = 512, 256, 32
USERS, ROUNDS = 2, 2
REQUEST_TIMEOUT_S = 300.0
SUCCESS = "vllm:request_success_total"
L0_HITS = "vllm:prefix_cache_hits_total"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
ROUTER_DECISIONS = "decision"  # the router's per-decision counters (cache_aware: cache_affinity, low_match_min_load)


@dataclass
class Routed:
    model: str
    user: str
    round: int
    engine: str
    prompt_tokens: int
    l0_hit_tokens: float
    external_hit_tokens: float
    ms: float
    router_decision: str  # the router's decision counters that moved (cache_aware: `cache_affinity` = its text matched)
    own_shared_tokens: int  # leading tokens an earlier request of the same model sent (what it may reuse)


@dataclass
class StrategyResult:
    strategy: str
    policy: str
    requests: list[Routed] = field(default_factory=list)
    seconds: float = 0.0

    def totals(self) -> dict[str, float]:
        prompt = sum(r.prompt_tokens for r in self.requests)
        l0 = sum(r.l0_hit_tokens for r in self.requests)
        external = sum(r.external_hit_tokens for r in self.requests)
        return {
            "prompt": prompt,
            "l0": l0,
            "external": external,
            "computed": prompt - l0 - external,
            "ttft_p50_ms": percentile([r.ms for r in self.requests], 50) or 0.0,
        }

    def engines_per_model(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter[str]] = {}
        for r in self.requests:
            out.setdefault(r.model, Counter())[r.engine] += 1
        return {model: dict(sorted(c.items())) for model, c in out.items()}


@dataclass
class AdapterRoutingObserved:
    models: tuple[str, ...]
    block_tokens: int
    results: dict[str, StrategyResult] = field(default_factory=dict)


def _counters(engines: dict[str, Engine]) -> dict[str, dict[str, float]]:
    out = {}
    for key, engine in engines.items():
        text = httpx.get(f"{engine.url}/metrics", timeout=30).text
        out[key] = {name: metric_sum(text, name) for name in (SUCCESS, L0_HITS, EXTERNAL_HITS)}
    return out


def _send(
    router: Router, engines: dict[str, Engine], model: str, prompt: list[int], session: str | None
) -> tuple[str, dict[str, float], int, float, str]:
    before = _counters(engines)
    decisions = _decisions(router)
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    headers = {serving.SESSION_HEADER: session} if session else {}
    started = time.perf_counter()
    response = httpx.post(f"{router.url}/v1/completions", json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise router.fail(f"POST /v1/completions ({model}) answered {response.status_code}: {response.text[:300]}")
    time.sleep(0.5)  # vLLM counts the step's hits when it logs its stats
    after = _counters(engines)
    moved = [k for k in engines if after[k][SUCCESS] > before[k][SUCCESS]]
    if len(moved) != 1:
        raise EngineError(f"a {model} request was counted by {len(moved)} engines ({moved}); expected exactly one")
    key = moved[0]
    deltas = {name: after[key][name] - before[key][name] for name in (L0_HITS, EXTERNAL_HITS)}
    after_decisions = _decisions(router)
    moved = sorted(k for k, v in after_decisions.items() if v > decisions.get(k, 0.0))
    prompt_tokens = int((response.json().get("usage") or {}).get("prompt_tokens", 0))
    return key, deltas, prompt_tokens, ms, " ".join(moved)


def _decisions(router: Router) -> dict[str, float]:
    """The router's counters with a decision label, by series (name and labels)."""
    out: dict[str, float] = {}
    for line in router.metrics().splitlines():
        if ROUTER_DECISIONS in line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def run_strategy(
    strategy: str, python: str, site: Path, workdir: Path, engines: dict[str, Engine], models: dict[str, str]
) -> StrategyResult:
    """`models`: the name in STEPS-style form (base, alpha, ...) -> the `model` field the request carries."""
    args = localize(rendered_router_args(strategy, None), [e.url for e in engines.values()], *_ports())
    result = StrategyResult(strategy, args[args.index("--policy") + 1])
    rng = random.Random(f"kvtier-adapter-router:{strategy}")
    system = _tokens(rng, SYSTEM_TOKENS)
    docs = {(m, u): _tokens(rng, DOC_TOKENS) for m in models for u in range(USERS)}
    started = time.monotonic()
    with running(Router(python, site, args, workdir / f"router-adapters-{strategy}.log")) as router:
        for rnd in range(ROUNDS):
            for user in range(USERS):
                for model, sent_as in models.items():
                    prompt = system + docs[(model, user)] + _tokens(rng, QUESTION_TOKENS)
                    session = f"{strategy}-{model}-u{user}"
                    engine, hits, prompt_tokens, ms, decision = _send(router, engines, sent_as, prompt, session)
                    l0, external = hits[L0_HITS], hits[EXTERNAL_HITS]
                    own = SYSTEM_TOKENS + DOC_TOKENS if rnd else (SYSTEM_TOKENS if user else 0)
                    routed = Routed(model, f"u{user}", rnd, engine, prompt_tokens, l0, external, ms, decision, own)
                    result.requests.append(routed)
    result.seconds = time.monotonic() - started
    return result


def _tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(3, 2048) for _ in range(count)]


def _ports() -> tuple[int, int]:
    from kvtier.bench.testserver import free_port

    return free_port(), free_port()


def adapter_routing(
    python: str, site: Path, workdir: Path, engines: dict[str, Engine], models: dict[str, str], block_tokens: int
) -> AdapterRoutingObserved:
    observed = AdapterRoutingObserved(tuple(models), block_tokens)
    for strategy in ROUTER_POLICY:
        observed.results[strategy] = run_strategy(strategy, python, site, workdir, engines, models)
    return observed


def table(observed: AdapterRoutingObserved) -> list[dict[str, Any]]:
    """One row per strategy: where each model went and where its prompt tokens came from."""
    rows = []
    for strategy, result in observed.results.items():
        totals = result.totals()
        rows.append(
            {
                "strategy": strategy,
                "policy": result.policy,
                "engines_per_model": result.engines_per_model(),
                **{k: round(v, 1) for k, v in totals.items()},
                "seconds": round(result.seconds, 1),
            }
        )
    return rows


# --- checks, plain functions of what was observed (tests/engine/test_identity.py runs them on fakes too) ---


def whole(tokens: int, unit: int) -> int:
    return tokens // unit * unit


def own_prefix_everywhere(observed: AdapterRoutingObserved, strategy: str, chunk_tokens: int) -> None:
    """Wherever the strategy sends a request, it finds every whole LMCache chunk of what an earlier request of its
    own model sent (from L0 on that engine, or from L1/L2), and never more: another model's KV for the same text
    is never served, however the router matched it."""
    result = observed.results[strategy]
    short, extra = [], []
    for r in result.requests:
        cached = r.l0_hit_tokens + r.external_hit_tokens
        if cached < whole(r.own_shared_tokens, chunk_tokens):
            short.append((r.model, r.user, r.round, r.engine, cached, r.own_shared_tokens))
        if cached > r.own_shared_tokens:
            extra.append((r.model, r.user, r.round, r.engine, cached, r.own_shared_tokens))
    assert not short, (
        f"{strategy} ({result.policy}): (model, user, round, engine, cached, own) missed their own KV: {short}"
    )
    assert not extra, (
        f"{strategy} ({result.policy}): (model, user, round, engine, cached, own) took another model's KV: {extra}"
    )
