"""Elastic endpoints with real engines (issue 27): a replica added later is warm from L2 on its first request, and a
replica removed mid-traffic loses only what the router cannot retry. The assertions live in scale_out_checks.py.

Phase 1 (three engines): A and B are two replicas of the example's standalone endpoint behind kvtier's router
(vllm-router with the flags kvtier renders, routers.py); C-cold is the same rendering on an empty L2 folder of its own
(a replica without the shared pool). A shared-prefix workload runs through the router: PREFIXES prefixes of
PREFIX_TOKENS, each sent by new sessions until both A and B served it, so one stores its chunks in the shared L2 and
the other reads them. C-cold then answers one new request per prefix, the first it ever sees (the cold baseline),
and stops. Phase 2: C-warm starts with the same rendering and the shared L2 (the scale-out); while it loads,
sessions stream through the router and B's pod is deleted as Kubernetes deletes a pod it scales in
(pod_deletion.py: the router's discovery removes it, the rendered preStop hook drains it, then SIGTERM), every
request measured by `kvtier bench`'s own client (kvtier/bench/client.py), failures included, with a CPU hog keeping
both cores busy for the whole phase (cpu_load.py; issue 38: the guarantee must hold on a loaded machine). Last,
C-warm answers the requests C-cold answered, in the same order.

`KVTIER_SCALE_OUT_BREAK` (hash-seed, l2-url or chunk-size, scenario.BREAKS) renders only the new replica C-warm
with that wrong value, to show that the checks notice a new replica whose L2 settings differ from the others'.
`KVTIER_DRAIN_BREAK=1` renders the engines without their preStop drain (kvtier/k8s/drain.py): the scale-in checks
must then fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from kvtier.bench.client import send
from kvtier.bench.http import new_client
from kvtier.bench.records import Request, RequestRecord
from kvtier.bench.testserver import free_port
from kvtier.k8s.drain import drain_broken
from kvtier.k8s.router import router_args
from kvtier.rules import load_checked
from kvtier.serving import SESSION_HEADER
from tests.engine import render
from tests.engine.cpu_load import Load, cpu_hog
from tests.engine.engines import Engine, Engines
from tests.engine.pod_deletion import Deleted, Termination, delete_pod, rendered_termination
from tests.engine.routers import Router, localize, running
from tests.engine.routing_scenario import sequential
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    LOB,
    REPO,
    STARTUP_TIMEOUT_S,
    STORE_TIMEOUT_S,
    Reading,
    ask,
    broken,
    build_model,
    l2_files,
)

PREFIXES, PREFIX_TOKENS, SUFFIX_TOKENS = 3, 2048, 32
SESSIONS_PER_ENGINE, SESSION_CANDIDATES = 2, 16  # scale-in sessions on each of A and B, among so many names
STREAM_TOKENS = 160  # tokens per streamed answer (ignore_eos): B is always mid-stream when its pod is deleted
STREAM_PROMPT_TOKENS = 64
STOP_AFTER_S = 4.0  # traffic before B's pod is deleted
AFTER_STOP_S = 6.0  # traffic after B's process group is gone
REQUEST_TIMEOUT_S = 120.0
# The CPU hog runs through the whole scale-in phase and ends by itself after this (the phase takes well under it).
HOG_MAX_S = 900.0


@dataclass
class ScaleObserved:
    """What the checks look at, plus what the report prints."""

    chunk_size: int  # the endpoint's `cache.chunk_size` in the config, not what kvtier rendered
    prefix_full_tokens: int  # the whole chunks of one shared prefix
    break_what: str | None = None
    urls: dict[str, str] = field(default_factory=dict)  # engine -> the remote_url kvtier rendered for it
    cold: list[Reading] = field(default_factory=list)  # C-cold, one first request per prefix
    warm: list[Reading] = field(default_factory=list)  # C-warm, the same requests in the same order
    stored_chunk_files: int = 0  # chunk files in the shared L2 after the workload
    workload_engines: dict[str, str] = field(default_factory=dict)  # "prefix<i>-user<j>" -> the engine that served it
    sessions: dict[str, str] = field(default_factory=dict)  # scale-in session -> its engine before the stop
    stop_ms: tuple[float, float] = (0.0, 0.0)  # B's pod deleted, B's process group gone (traffic clock)
    drain_break: bool = False  # KVTIER_DRAIN_BREAK: the engines were rendered without their preStop drain
    termination: dict[str, Any] = field(default_factory=dict)  # the rendered hook (present or not) and grace period
    deletion: dict[str, Any] = field(default_factory=dict)  # pod_deletion.Deleted
    load: dict[str, Any] = field(default_factory=dict)  # cpu_load.Load, with its window on the traffic clock
    stream_tokens: int = STREAM_TOKENS
    records: list[dict[str, Any]] = field(default_factory=list)  # scale-in requests, as kvtier bench records them
    router_args: list[str] = field(default_factory=list)
    router_counters: dict[str, float] = field(default_factory=dict)  # retry and error counters after the scale-in
    timings_s: dict[str, float] = field(default_factory=dict)
    machine_fit: tuple[str, ...] = render.MACHINE_FIT

    def ttft_ms(self, side: str) -> list[float]:
        return [r.answer_ms for r in (self.cold if side == "cold" else self.warm)]

    def ratio(self) -> dict[str, float]:
        """Cold over warm: the first request of each new replica, and the median over all prefixes."""
        cold, warm = self.ttft_ms("cold"), self.ttft_ms("warm")
        if not cold or not warm:
            return {}
        return {
            "first": cold[0] / warm[0],
            "median": statistics.median(cold) / statistics.median(warm),
            "cold_first_ms": cold[0],
            "warm_first_ms": warm[0],
            "cold_median_ms": statistics.median(cold),
            "warm_median_ms": statistics.median(warm),
        }


def tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(3, 2048) for _ in range(count)]  # 0-2 are the special tokens


def stream_body(model: str, prompt: list[int]) -> bytes:
    """kvtier bench's streaming body (records.request_body) with token ids, which it has no text option for."""
    body = {
        "model": model, "prompt": prompt, "max_tokens": STREAM_TOKENS, "temperature": 0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    return json.dumps(body, separators=(",", ":")).encode()


def wait_stored(l2_root: Path, expected: int) -> int:
    """LMCache writes L2 after the forward pass: wait (bounded) until `expected` chunk files exist."""
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while True:
        found = sum(1 for f in l2_files(l2_root) if f.endswith(".data"))
        if found >= expected or time.monotonic() > deadline:
            return found
        time.sleep(1)


ROUTER_COUNTER_WORDS = ("retr", "error", "circuit", "worker")


def router_counters(router: Router) -> dict[str, float]:
    """The router's own retry, error and worker series (names as 0.1.17 exports them), for the report."""
    out: dict[str, float] = {}
    for line in router.metrics().splitlines():
        if line.startswith("#") or not any(w in line for w in ROUTER_COUNTER_WORDS):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


async def scale_in_traffic(
    router: Router,
    victim: Engine,
    served: str,
    sessions: dict[str, list[int]],
    delete: Callable[[Callable[[], float]], Deleted],
) -> tuple[list[RequestRecord], Deleted, float]:
    """Each session streams request after request through the router; after STOP_AFTER_S the victim's pod is deleted
    (`delete`, given the traffic clock, returns when its process group is gone); sending goes on for AFTER_STOP_S
    after that. Returns the records, the deletion, and the traffic clock's origin (time.perf_counter())."""
    origin = time.perf_counter()
    done: list[Deleted] = []

    def clock_ms() -> float:
        return (time.perf_counter() - origin) * 1000

    async def stop_victim() -> None:
        await asyncio.sleep(STOP_AFTER_S)
        deleted = Deleted(deleted_ms=clock_ms())
        try:
            deleted = await asyncio.to_thread(delete, clock_ms)
        finally:  # the sessions end AFTER_STOP_S after this even if stopping failed (`await stopper` raises it)
            deleted.gone_ms = deleted.gone_ms or clock_ms()
            done.append(deleted)

    async def session(client: aiohttp.ClientSession, key: str, prompt: list[int]) -> list[RequestRecord]:
        out: list[RequestRecord] = []
        index = 0
        rng = random.Random(f"kvtier-scale-in:{key}")
        while not done or clock_ms() < done[0].gone_ms + AFTER_STOP_S * 1000:
            turn = prompt + tokens(rng, 4)  # a new question in the session
            request = Request(
                "scale-in", router.url, "completions", stream_body(served, turn), index,
                {"session": key}, {SESSION_HEADER: key},
            )  # fmt: skip
            out.append(await send(client, request, timeout_s=REQUEST_TIMEOUT_S, origin=origin))
            index += 1
        return out

    async with new_client(REQUEST_TIMEOUT_S) as client:
        stopper = asyncio.create_task(stop_victim())
        per_session = await asyncio.gather(*(session(client, k, p) for k, p in sessions.items()))
        await stopper
    return [r for records in per_session for r in records], done[0], origin


def shared_prefix_workload(
    router: Router,
    engines: dict[str, Engine],
    served: str,
    prefixes: list[list[int]],
    rng: random.Random,
    observed: ScaleObserved,
) -> None:
    """Users of each shared prefix, one session each, until both engines served the prefix (the router's hash of the
    session header decides; the first to get a prefix computes and stores it, the other reads it from L2)."""
    for i, prefix in enumerate(prefixes):
        for user in range(SESSION_CANDIDATES):
            key = f"prefix{i}-user{user}"
            sent = sequential(router, engines, served, key, 0, prefix + tokens(rng, SUFFIX_TOKENS), key)
            observed.workload_engines[key] = sent.engine or "?"
            if {e for k, e in observed.workload_engines.items() if k.startswith(f"prefix{i}-")} == set(engines):
                break


def scale_in_sessions(
    router: Router, engines: dict[str, Engine], served: str, rng: random.Random, observed: ScaleObserved
) -> dict[str, list[int]]:
    """SESSIONS_PER_ENGINE sessions whose hash picks A and as many for B (one request each tells which)."""
    chosen: dict[str, list[int]] = {}
    for i in range(SESSION_CANDIDATES):
        key, prompt = f"scale-in-{i}", tokens(rng, STREAM_PROMPT_TOKENS)
        engine = sequential(router, engines, served, key, 0, prompt, key).engine or "?"
        if sum(1 for e in observed.sessions.values() if e == engine) < SESSIONS_PER_ENGINE:
            observed.sessions[key] = engine
            chosen[key] = prompt
        if len(chosen) == SESSIONS_PER_ENGINE * len(engines):
            break
    return chosen


def load_json(load: Load, origin: float) -> dict[str, Any]:
    """The hog's numbers, and its window on the traffic clock (ms; the hog started before the traffic)."""
    start_ms = (load.started - origin) * 1000
    return {
        "processes": load.processes, "alive_at_stop": load.alive_at_stop, "cpu_s": load.cpu_s,
        "wall_s": load.wall_s, "cores_busy": load.cores_busy, "loadavg_1m_at_stop": load.loadavg_1m_at_stop,
        "machine_busy": load.machine_busy,
        "window_ms": (start_ms, start_ms + load.wall_s * 1000),
    }  # fmt: skip


def record_json(record: RequestRecord, engine: str) -> dict[str, Any]:
    return {
        "session": record.tags.get("session"), "engine": engine, "start_ms": record.start_ms,
        "end_ms": record.start_ms + (record.e2e_ms or 0.0), "ok": record.ok, "status": record.status,
        "error_kind": record.error_kind, "error": record.error, "completion_tokens": record.completion_tokens,
    }  # fmt: skip


def scale_in_phase(
    python: str,
    workdir: Path,
    router: Router,
    victim: Engine,
    termination: Termination,
    served: str,
    sessions: dict[str, list[int]],
    observed: ScaleObserved,
) -> list[RequestRecord]:
    """The victim's pod deleted under streaming traffic, with the CPU hog on every core for the whole phase."""
    observed.drain_break = drain_broken()
    observed.termination = {"pre_stop": termination.pre_stop is not None, "grace_s": termination.grace_s}

    def delete(clock_ms: Callable[[], float]) -> Deleted:
        return delete_pod(victim, router.url, termination, python, workdir / "B-prestop.log", clock_ms)

    with cpu_hog(HOG_MAX_S) as load:
        records, deleted, origin = asyncio.run(scale_in_traffic(router, victim, served, sessions, delete))
    observed.stop_ms = (deleted.deleted_ms, deleted.gone_ms)
    observed.deletion = dataclasses.asdict(deleted)
    observed.load = load_json(load, origin)
    return records


def scale_scenario(python: str, site: Path, workdir: Path, break_what: str | None) -> ScaleObserved:
    total = time.monotonic()
    config = load_checked(REPO / "config", ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    chunk = endpoint.cache.chunk_size
    observed = ScaleObserved(chunk, PREFIX_TOKENS // chunk * chunk, break_what)
    model_dir = workdir / "model"
    observed.timings_s["model_build"] = build_model(python, model_dir)
    l2_root, cold_root = workdir / "l2", workdir / "l2-cold"  # the shared pool; C-cold's own, empty
    l2_root.mkdir(exist_ok=False)
    cold_root.mkdir(exist_ok=False)
    replica = render.standalone(config, LOB, endpoint)
    with broken(break_what):  # only the new replica: a scale-out that rendered other L2 settings
        new_replica = render.standalone(config, LOB, endpoint)
    served = endpoint.model.id
    rng = random.Random("kvtier-scale-out")
    prefixes = [tokens(rng, PREFIX_TOKENS) for _ in range(PREFIXES)]
    probes = [prefix + tokens(rng, SUFFIX_TOKENS) for prefix in prefixes]  # what the new replica is asked first

    def launch(key: str, what: render.Rendered, root: Path) -> tuple[str, render.Launch]:
        observed.urls[key] = what.l2_url
        return key, render.localize(
            what,
            l2_root=root,
            private_root=workdir / f"root-{key}",
            model_dir=model_dir,
            port=free_port(),
            adapter_dir=ADAPTER_DIR,
        )

    with Engines(python, workdir, served, STARTUP_TIMEOUT_S) as group:
        started = time.monotonic()
        # C-cold second: it and C-warm (the fourth) get the same CPU (Engines.start binds engine i to CPU i % 2).
        a, cold, b = group.start(
            [launch("A", replica, l2_root), launch("C-cold", replica, cold_root), launch("B", replica, l2_root)]
        )
        observed.timings_s["phase1_start"] = time.monotonic() - started
        engines = {"A": a, "B": b}
        args = localize(router_args(LOB, endpoint), [a.url, b.url], free_port(), free_port())
        observed.router_args = args
        with running(Router(python, site, args, workdir / "router.log")) as router:
            started = time.monotonic()
            shared_prefix_workload(router, engines, served, prefixes, rng, observed)
            observed.stored_chunk_files = wait_stored(l2_root, PREFIXES * (PREFIX_TOKENS // chunk))
            observed.timings_s["workload"] = time.monotonic() - started
            observed.cold = [ask(cold, probe, cold_root, wait_store=False) for probe in probes]
            group.stop(cold)
            # The scale-out replica starts now, after the workload; it loads while the scale-in runs.
            scale_out_started = time.monotonic()
            (warm,) = group.launch([launch("C-warm", new_replica, l2_root)])
            started = time.monotonic()
            stream_prompts = scale_in_sessions(router, engines, served, rng, observed)
            termination = rendered_termination(config, LOB, endpoint)
            records = scale_in_phase(python, workdir, router, b, termination, served, stream_prompts, observed)
            observed.timings_s["scale_in"] = time.monotonic() - started
            observed.records = [record_json(r, observed.sessions[str(r.tags["session"])]) for r in records]
            observed.router_counters = router_counters(router)
        group.wait([warm])
        observed.timings_s["scale_out_start"] = time.monotonic() - scale_out_started
        observed.warm = [ask(warm, probe, l2_root, wait_store=False) for probe in probes]
        for key, engine in (("A", a), ("B", b), ("C-cold", cold)):
            observed.timings_s[f"ready_{key}"] = engine.ready_s or 0.0
    observed.timings_s["scenario"] = time.monotonic() - total
    return observed
