"""Two router replicas in front of the same engines (issue 38): what routing state costs when the router Service
spreads requests over two vllm-router processes, each with kvtier's flags, as kube-proxy does (a random replica per
connection; here per request, the worst case).

Engines A and B run kvtier's standalone rendering with the shared L2 folder (as routing_scenario.py). For each
stateful strategy, two runs on fresh token ids, each through `one` router and then through `two` (R1 and R2 with
the same flags, a seeded random pick per request):
- `prefixaware` (cache_aware): PREFIXES prefixes of PREFIX_TOKENS, ROUNDS rounds, each request a new SUFFIX_TOKENS
  suffix, one at a time. Per request: the engine that served it and the prompt tokens it found in vLLM's own prefix
  cache (L0, `vllm:prefix_cache_hits_total`) and loaded by LMCache (L1/L2, `vllm:external_prefix_cache_hits_total`).
  Each replica keeps its own radix trees (cache_aware.rs), so with two a prefix can have a home per replica; what one
  replica's engine computed reaches the other's through the shared L2;
- `session` (consistent_hash): SESSIONS sessions, SESSION_ROUNDS rounds each, the session header set. The ring is a
  function of the worker URLs (consistent_hash.rs `update_hash_ring`, fixed-seed hashes), so both replicas send a
  session to the same engine as one router does.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtier.bench.testserver import free_port
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.rules import load_checked
from tests.engine import render
from tests.engine.engines import Engine, Engines
from tests.engine.routers import ENGINE_EXTRA_ARGS, Router, localize
from tests.engine.routing_scenario import (
    EXTERNAL_HITS,
    L0_HITS,
    cached,
    counters,
    post,
    rendered_router_args,
    tokens,
)
from tests.engine.scale_out import wait_stored
from tests.engine.scenario import ADAPTER_DIR, ENDPOINT, ENV_NAME, LOB, REPO, STARTUP_TIMEOUT_S, build_model, l2_files

PREFIXES, ROUNDS, PREFIX_TOKENS, SUFFIX_TOKENS = 6, 5, 1024, 24
SESSIONS, SESSION_ROUNDS, SESSION_TOKENS = 6, 3, 64
STRATEGIES = ("prefixaware", "session")


@dataclass
class Served:
    key: str
    round: int
    replica: str  # R1 or R2
    engine: str
    prompt_tokens: int
    cached_tokens: int
    l0_tokens: float
    external_tokens: float


@dataclass
class ReplicaRun:
    strategy: str
    routers: int  # 1 or 2
    args: list[str] = field(default_factory=list)
    served: list[Served] = field(default_factory=list)

    def repeats(self) -> list[Served]:
        return [s for s in self.served if s.round > 0]

    def summary(self) -> dict[str, float]:
        """Over the requests after each key's first: the share of prompt tokens from L0, from L1/L2, from either,
        and the share that moved to another engine than the key's previous request."""
        repeats = self.repeats()
        prompt = sum(s.prompt_tokens for s in repeats) or 1
        last: dict[str, str] = {}
        moved = 0
        for s in sorted(self.served, key=lambda s: (s.round, s.key)):
            if s.round > 0 and last.get(s.key) != s.engine:
                moved += 1
            last[s.key] = s.engine
        return {
            "requests": float(len(repeats)),
            "l0_share": sum(s.l0_tokens for s in repeats) / prompt,
            "external_share": sum(s.external_tokens for s in repeats) / prompt,
            "cached_share": sum(s.cached_tokens for s in repeats) / prompt,
            "moved_share": moved / (len(repeats) or 1),
        }


@dataclass
class ReplicasObserved:
    runs: dict[str, dict[int, ReplicaRun]] = field(default_factory=dict)  # strategy -> routers -> run
    chunk_tokens: int = 0
    timings_s: dict[str, float] = field(default_factory=dict)

    def table(self) -> dict[str, dict[int, dict[str, float]]]:
        return {s: {n: run.summary() for n, run in by.items()} for s, by in self.runs.items()}


def one_request(
    routers: dict[str, Router], engines: dict[str, Engine], served: str, replica: str, key: str, rnd: int,
    prompt: list[int], header: str | None,
) -> Served:  # fmt: skip
    before = {name: counters(engines, name) for name in ("vllm:request_success_total", L0_HITS, EXTERNAL_HITS)}
    answer, _ms = post(routers[replica], served, prompt, header)
    after = {name: counters(engines, name) for name in ("vllm:request_success_total", L0_HITS, EXTERNAL_HITS)}
    moved = [k for k in engines if after["vllm:request_success_total"][k] > before["vllm:request_success_total"][k]]
    if len(moved) != 1:
        raise AssertionError(f"{key}/{rnd}: {len(moved)} engines counted the request ({moved})")

    def delta(name: str) -> float:
        return sum(after[name][k] - before[name][k] for k in engines)

    return Served(key, rnd, replica, moved[0], len(prompt), cached(answer), delta(L0_HITS), delta(EXTERNAL_HITS))


def run_workload(
    strategy: str, count: int, routers: dict[str, Router], engines: dict[str, Engine], served: str, l2_root: Path,
    chunk: int,
) -> ReplicaRun:  # fmt: skip
    run = ReplicaRun(strategy, count, routers["R1"].args)
    rng = random.Random(f"kvtier-router-replicas:{strategy}:{count}")  # fresh tokens per run: no inherited cache
    pick = random.Random(f"kvtier-router-replicas:pick:{strategy}")
    names = ["R1", "R2"][:count]
    if strategy == "prefixaware":
        prefixes = [tokens(rng, PREFIX_TOKENS) for _ in range(PREFIXES)]
        stored = sum(1 for f in l2_files(l2_root) if f.endswith(".data"))
        for rnd in range(ROUNDS):
            for i, prefix in enumerate(prefixes):
                prompt = prefix + tokens(rng, SUFFIX_TOKENS)
                run.served.append(one_request(routers, engines, served, pick.choice(names), f"p{i}", rnd, prompt, None))
            if rnd == 0:  # LMCache writes L2 after the forward pass: wait (bounded) until every prefix is there
                wait_stored(l2_root, stored + PREFIXES * (PREFIX_TOKENS // chunk))
        return run
    for rnd in range(SESSION_ROUNDS):
        for i in range(SESSIONS):
            key = f"{strategy}-{count}-s{i}"
            prompt = tokens(rng, SESSION_TOKENS)
            run.served.append(one_request(routers, engines, served, pick.choice(names), key, rnd, prompt, key))
    return run


def routed_engines(
    python: str, workdir: Path, config: Config, endpoint: Endpoint
) -> tuple[Callable[[str], tuple[str, render.Launch]], float]:
    """The tiny model (built, with its build time) and a launcher of engines of `endpoint` as kvtier renders it plus
    ENGINE_EXTRA_ARGS, sharing one L2 folder under `workdir`: what every test with the real router starts."""
    model_dir = workdir / "model"
    built_s = build_model(python, model_dir)
    l2_root = workdir / "l2"
    l2_root.mkdir(exist_ok=True)
    rendered = render.standalone(config, LOB, endpoint)
    rendered = render.Rendered(rendered.name, (*rendered.args, *ENGINE_EXTRA_ARGS), rendered.env, rendered.files)

    def launch(key: str) -> tuple[str, render.Launch]:
        return key, render.localize(
            rendered,
            l2_root=l2_root,
            private_root=workdir / f"root-{key}",
            model_dir=model_dir,
            port=free_port(),
            adapter_dir=ADAPTER_DIR,
        )

    return launch, built_s


def replicas_scenario(python: str, site: Path, workdir: Path) -> ReplicasObserved:
    total = time.monotonic()
    observed = ReplicasObserved()
    config = load_checked(REPO / "config", ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    observed.chunk_tokens = endpoint.cache.chunk_size
    launch, observed.timings_s["model_build"] = routed_engines(python, workdir, config, endpoint)
    l2_root = workdir / "l2"
    with Engines(python, workdir, endpoint.model.id, STARTUP_TIMEOUT_S) as group:
        started = time.monotonic()
        a, b = group.start([launch("A"), launch("B")])
        observed.timings_s["engines_start"] = time.monotonic() - started
        engines = {"A": a, "B": b}
        for strategy in STRATEGIES:
            rendered_args = rendered_router_args(strategy, None)
            observed.runs[strategy] = {}
            for count in (1, 2):
                started = time.monotonic()
                routers: dict[str, Router] = {}
                try:
                    for name in ["R1", "R2"][:count]:
                        args = localize(rendered_args, [a.url, b.url], free_port(), free_port())
                        router = Router(python, site, args, workdir / f"router-{strategy}-{count}-{name}.log")
                        routers[name] = router
                        router.start()
                    run = run_workload(
                        strategy, count, routers, engines, endpoint.model.id, l2_root, endpoint.cache.chunk_size
                    )
                finally:
                    for router in routers.values():
                        router.stop()
                observed.runs[strategy][count] = run
                observed.timings_s[f"{strategy}_{count}"] = time.monotonic() - started
    observed.timings_s["scenario"] = time.monotonic() - total
    return observed


def as_json(observed: ReplicasObserved) -> dict[str, Any]:
    from dataclasses import asdict

    return {**asdict(observed), "summary": observed.table()}
