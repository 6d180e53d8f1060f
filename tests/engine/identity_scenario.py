"""The identity scenario (issues 34 and 35): `cache_salt` and LoRA adapters on a shared L2, with real engines.

The example's standalone endpoint gets two tiny LoRA adapters (tiny_adapters.py: random weights on the tiny model) and
is rendered by kvtier for each connector, LoRA on. Engines, each started once:
- R, the run without any cache: the LMCache rendering without its KV connector and with vLLM's prefix cache off;
  it gives the reference greedy tokens of every (prompt, model) below, then stops;
- an LMCache pair (kvtier's `KvtierLMCacheConnectorV1`, `fs://` below the shared folder, plus `--enable-scale-out`
  for the router phase) and a vLLM pair (OffloadingConnector with its `fs` tier, as vllm_scenario.py runs it). The
  vLLM pair starts while the LMCache phases run, so its start-up overlaps them.
On each pair, as phases (STEPS, in order; engine 1 writes, engine 2 reads):
- salt: salt X on 1 (cold), X on 2 (an L2 hit), then salt Y and no salt on 2 (0 hit tokens on every tier);
- adapter: adapter A on 1 (cold), A on 2 (an L2 hit), then adapter B and the base model on 2 (0 hit tokens), and
  the other way round: the base model on 1, then A on 2 with the same (third) prompt (0 hit tokens);
- routing (LMCache pair only): mixed adapter traffic through the real router, per strategy (adapter_routing.py).
Beside them, M (the LMCache rendering with adapter B's folder empty, as after a fetch that found nothing) must stop
at start-up, never serving the base model in B's place; its last log lines (what Kubernetes keeps as the container's
termination message) go through `kvtier verify`'s reading, and kvtier's adapter check (the pod's last init
container) is run on M's folder and on the real adapters.
Every request asks for ANSWER_TOKENS greedy tokens; the checks (identity_checks.py) compare each request's token ids
with R's (a hit must load its own identity's KV, a miss compute as R does). What each request hit is read per tier: L0 from `vllm:prefix_cache_hits_total`; below it, vLLM's
`vllm:external_prefix_cache_hits_total` (the connector: L1 + L2) and the connector's own count, LMCache's lookup
line (`LMCache hit tokens: N`, over L1 and L2) or vLLM's per-tier chunk hits (`tier="0:primary"` L1, `"1:fs"` L2).

Break switches, set in the environment of the run (never in CI; docs/development.md): `KVTIER_SALT_BREAK=1` and
`KVTIER_ADAPTER_TAG_BREAK=1` reach the LMCache engines (kvtier's connector then sets no salt / adapter tag),
`KVTIER_ADAPTER_PATH_BREAK=1` makes kvtier render a per-replica adapter path (kvtier/k8s/adapters.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from kvtier.bench.testserver import free_port
from kvtier.config.adapters import ADAPTER_ROOT
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.connectors.plugins.kvtier_lmcache import ADAPTER_BREAK, SALT_BREAK
from kvtier.k8s.adapters import PATH_BREAK, POD_NAME_VAR, check_spec
from kvtier.k8s.scripts import ADAPTER_CHECK, script_text
from kvtier.k8s.scripts.adapter_check import SPEC_VAR
from kvtier.ops.verify import why_it_failed
from kvtier.rules import load_checked
from tests.engine import render, vllm_scenario
from tests.engine.adapter_routing import AdapterRoutingObserved, adapter_routing
from tests.engine.engines import Engine, Engines, metric_sum, tail
from tests.engine.routers import ENGINE_EXTRA_ARGS
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    HIT_LINE,
    LOB,
    MODEL_SEED,
    PROMPT_TOKENS,
    REPO,
    STARTUP_TIMEOUT_S,
    STORED_LINE,
    build_model,
    l2_files,
    prompt_ids,
    run_builder,
)

BASE = "base"  # the base model in STEPS (sent as the served model's name)
ADAPTERS = ("alpha", "beta")  # A and B
ADAPTER_RANK = 8
ADAPTER_VERSION = "2026-12-01"  # the S3 `weights_version` the test endpoint pins (part of every adapter's path)
ADAPTER_SEED = 35
ANSWER_TOKENS = 8
SALT_X, SALT_Y = "tenant-x-4f1b9c2e", "tenant-y-8d0a7e31"
PROMPT_SEEDS = {"salt": MODEL_SEED + 34, "adapter": MODEL_SEED + 35, "reverse": MODEL_SEED + 36}
STORE_TIMEOUT_S = 120.0
LMCACHE_PUBLISH_S = 10.0  # LMCache publishes its counters every 10 s (kvtier/k8s/observability/rules.py)
CONNECTORS = ("lmcache", "vllm")
BREAK_SWITCHES = (SALT_BREAK, ADAPTER_BREAK, PATH_BREAK)
L0_HITS = "vllm:prefix_cache_hits_total"
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
TIER_CHUNK_HITS = "vllm:kv_offload_tiering_chunk_hits_total"
TIERS = {"0:primary": "L1", "1:fs": "L2"}  # vLLM's tier labels (vllm/v1/kv_offload/tiering/metrics.py)
LMCACHE_L2_READ = "lmcache:num_remote_read_bytes_total"
VLLM_L2_READ = 'vllm:kv_offload_tiering_read_bytes_total{tier="1:fs"}'
ADAPTER_FIT = (
    f"adapter root {ADAPTER_ROOT}: one local folder, the same path string for every engine (each pod mounts its "
    "own emptyDir there); each fetch init container: the locally built adapter copied to the path it renders",
    f"$({POD_NAME_VAR}) in the engine's args (only with {PATH_BREAK}): the engine's pod name, as Kubernetes expands it",
    "R: the LMCache rendering without its KV connector and with --no-enable-prefix-caching (the run without any cache)",
)


@dataclass(frozen=True)
class Step:
    name: str
    phase: str  # "salt" or "adapter"
    engine: int  # 0: engine 1 (writes), 1: engine 2 (reads)
    prompt: str  # a key of PROMPT_SEEDS
    model: str  # BASE or an adapter name
    salt: str | None
    cold: bool  # the first of its (prompt, model, salt) on the shared L2: wait until its files are written


A, B = ADAPTERS
STEPS = (
    Step("x_on_1", "salt", 0, "salt", BASE, SALT_X, True),
    Step("x_on_2", "salt", 1, "salt", BASE, SALT_X, False),
    Step("y_on_2", "salt", 1, "salt", BASE, SALT_Y, False),
    Step("unsalted_on_2", "salt", 1, "salt", BASE, None, False),
    Step("a_on_1", "adapter", 0, "adapter", A, None, True),
    Step("a_on_2", "adapter", 1, "adapter", A, None, False),
    Step("b_on_2", "adapter", 1, "adapter", B, None, False),
    Step("base_on_2", "adapter", 1, "adapter", BASE, None, False),
    Step("base_on_1", "adapter", 0, "reverse", BASE, None, True),
    Step("a_after_base_on_2", "adapter", 1, "reverse", A, None, False),
)
PHASES = ("salt", "adapter")


def reference_key(prompt: str, model: str) -> str:
    return f"{prompt}/{model}"


# The (prompt, model) pairs R answers: every step's, plus the three models on the adapter prompt (which must differ).
REFERENCES = tuple(
    dict.fromkeys(
        [reference_key(s.prompt, s.model) for s in STEPS] + [reference_key("adapter", m) for m in (BASE, *ADAPTERS)]
    )
)


@dataclass
class Answer:
    """What one request got and hit, per tier."""

    engine: str
    model: str
    salt: str | None
    prompt_tokens: int
    cached_tokens: int  # usage.prompt_tokens_details.cached_tokens: L0 + the connector
    token_ids: list[int]
    l0_hit_tokens: float  # vllm:prefix_cache_hits_total, delta
    external_hit_tokens: float  # vllm:external_prefix_cache_hits_total, delta: the connector (L1 + L2)
    lmcache_hit_tokens: list[int] = field(default_factory=list)  # LMCache's lookup (L1 + L2); LMCache only
    tier_chunk_hits: dict[str, float] = field(default_factory=dict)  # "L1"/"L2" -> vLLM chunk hits; vLLM only
    new_l2_files: list[str] = field(default_factory=list)
    answer_ms: float = 0.0


@dataclass
class PairRun:
    """One connector's engine pair through every step."""

    connector: str
    unit_tokens: int  # an L2 file's tokens (LMCache chunk, vLLM block, as run)
    full_tokens: int  # the prompt's tokens in whole files: what a whole-prompt L2 hit loads
    answers: dict[str, Answer] = field(default_factory=dict)
    l2_read_bytes: dict[str, float] = field(default_factory=dict)  # phase -> engine 2's L2 reads over it
    adapter_paths: dict[str, str] = field(default_factory=dict)  # engine -> where it loaded adapter A
    timings_s: dict[str, float] = field(default_factory=dict)


@dataclass
class IdentityObserved:
    references: dict[str, list[int]] = field(default_factory=dict)  # reference_key -> R's greedy token ids
    pairs: dict[str, PairRun] = field(default_factory=dict)
    breaks: dict[str, str] = field(default_factory=dict)  # break switches set for this run
    routing: AdapterRoutingObserved | None = None
    missing_adapter: dict[str, Any] = field(default_factory=dict)  # engine M and the adapter check
    lora_series: dict[str, list[str]] = field(default_factory=dict)  # engine -> its vllm:lora_requests_info lines
    timings_s: dict[str, float] = field(default_factory=dict)
    machine_fit: tuple[str, ...] = render.MACHINE_FIT + vllm_scenario.LOCAL_FIT + ADAPTER_FIT


def adapter_endpoint(config: Config, connector: str) -> Endpoint:
    """The example's standalone endpoint with the two test adapters (S3, pinned) and room for both in a batch,
    validated as a config file would be (so `check_adapters` runs)."""
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    adapters = [
        {
            "name": name,
            "rank": ADAPTER_RANK,
            "base_model": endpoint.model.id,
            "source": {
                "source": "s3",
                "bucket": "kvtier-test-adapters",
                "prefix": f"tiny/{name}",
                "weights_version": ADAPTER_VERSION,
            },
        }
        for name in ADAPTERS
    ]
    data = endpoint.model_dump(mode="json", exclude_unset=True)
    data |= {"adapters": adapters, "lora": {"max_loras": len(ADAPTERS), "max_lora_rank": ADAPTER_RANK}}
    data["cache"] = {**data.get("cache", {}), "connector": connector}
    return Endpoint.model_validate(data)


def build_adapters(python: str, model_dir: Path, out: Path) -> float:
    """Write the adapters with peft (kept when already there: the build is deterministic from ADAPTER_SEED)."""
    if all((out / name / "adapter_model.safetensors").exists() for name in ADAPTERS):
        return 0.0
    started = time.monotonic()
    args = [str(model_dir), str(out), str(ADAPTER_RANK), str(ADAPTER_SEED), *ADAPTERS]
    run_builder(python, "tiny_adapters.py", args, "the tiny adapters")
    return time.monotonic() - started


def with_adapters(launch: render.Launch, *, pod: str, adapter_root: Path, built: Path) -> render.Launch:
    """The engine's `--lora-modules` paths below ADAPTER_ROOT mapped into `adapter_root` (one folder, so one string,
    for every engine) after expanding the pod name, and each adapter copied there (what its fetch init container
    does in the pod)."""
    args = [arg.replace(f"$({POD_NAME_VAR})", pod) for arg in launch.args]
    at = args.index("--lora-modules") + 1
    while at < len(args) and not args[at].startswith("--"):
        name, _, path = args[at].partition("=")
        if not path.startswith(f"{ADAPTER_ROOT}/"):
            raise AssertionError(f"kvtier rendered adapter {name} at {path}, not below {ADAPTER_ROOT}")
        local = adapter_root / path.removeprefix(f"{ADAPTER_ROOT}/")
        if not local.exists():
            shutil.copytree(built / name, local)
        args[at] = f"{name}={local}"
        at += 1
    return replace(launch, args=tuple(args))


def without_cache(launch: render.Launch) -> render.Launch:
    """The same engine with no KV connector and no prefix cache: every token computed, every time."""
    args = list(launch.args)
    at = args.index("--kv-transfer-config")
    del args[at : at + 2]
    return replace(launch, name=f"{launch.name} (no cache)", args=(*args, "--no-enable-prefix-caching"), l2_dir=None)


def adapter_path(launch: render.Launch, name: str) -> str:
    args = list(launch.args)
    at = args.index("--lora-modules") + 1
    modules = dict(a.partition("=")[::2] for a in args[at:] if "=" in a and not a.startswith("--"))
    return modules[name]


def _labelled(text: str, name: str, label: str) -> dict[str, float]:
    """One counter's value per value of `label`."""
    found: dict[str, float] = {}
    pattern = re.compile(rf'^{re.escape(name)}\{{[^}}]*\b{label}="([^"]*)"[^}}]*\}}\s+([0-9.eE+-]+)$', re.MULTILINE)
    for value, number in pattern.findall(text):
        found[value] = found.get(value, 0.0) + float(number)
    return found


@dataclass
class Counters:
    l0: float
    external: float
    tiers: dict[str, float]

    @classmethod
    def read(cls, engine: Engine) -> Counters:
        text = httpx.get(f"{engine.url}/metrics", timeout=30).text
        tiers = _labelled(text, TIER_CHUNK_HITS, "tier")
        return cls(
            metric_sum(text, L0_HITS), metric_sum(text, EXTERNAL_HITS), {TIERS.get(k, k): v for k, v in tiers.items()}
        )


def _settled_files(l2_root: Path, before: set[str], suffix: str, at_least: int) -> set[str]:
    """New files once at least `at_least` end in `suffix` and two listings a second apart agree (bounded)."""
    deadline, last = time.monotonic() + STORE_TIMEOUT_S, None
    while True:
        new = l2_files(l2_root) - before
        if (sum(n.endswith(suffix) for n in new) >= at_least and new == last) or time.monotonic() > deadline:
            return new
        last = new
        time.sleep(1)


def ask(engine: Engine, step: Step, prompt: list[int], served: str, l2_root: Path, run: PairRun) -> Answer:
    before_files = l2_files(l2_root)
    before = Counters.read(engine)
    engine.new_log()
    body: dict[str, Any] = {
        "model": served if step.model == BASE else step.model,
        "prompt": prompt,
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "ignore_eos": True,  # always ANSWER_TOKENS tokens to compare
        "return_token_ids": True,
    }
    if step.salt is not None:
        body["cache_salt"] = step.salt
    sent = time.perf_counter()
    response = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=300)
    answer_ms = (time.perf_counter() - sent) * 1000
    if response.status_code != 200:
        raise engine.fail(f"{step.name}: POST /v1/completions answered {response.status_code}: {response.text[:300]}")
    answer = response.json()
    log = engine.new_log()
    new: set[str] = set()
    if step.cold:  # engine 2 must find every file of it: wait until they are all written
        units = run.full_tokens // run.unit_tokens
        if run.connector == "lmcache":
            deadline = time.monotonic() + STORE_TIMEOUT_S
            while not STORED_LINE.search(log) and time.monotonic() < deadline:
                time.sleep(1)
                log += engine.new_log()
            new = _settled_files(l2_root, before_files, ".data", units)
        else:
            new = _settled_files(l2_root, before_files, ".bin", units)
    else:
        time.sleep(1)  # vLLM counts the step's hits when it logs its stats
        new = l2_files(l2_root) - before_files
    log += engine.new_log()
    after = Counters.read(engine)
    usage = answer.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Answer(
        engine=engine.name,
        model=step.model,
        salt=step.salt,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens") or 0),
        token_ids=[int(t) for t in answer["choices"][0].get("token_ids") or []],
        l0_hit_tokens=after.l0 - before.l0,
        external_hit_tokens=after.external - before.external,
        lmcache_hit_tokens=[int(n) for n in HIT_LINE.findall(log)],
        tier_chunk_hits={t: after.tiers.get(t, 0.0) - before.tiers.get(t, 0.0) for t in after.tiers},
        new_l2_files=sorted(new),
        answer_ms=answer_ms,
    )


def reference_tokens(engine: Engine, prompts: dict[str, list[int]], served: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for key in REFERENCES:
        prompt, model = key.split("/")
        body = {"model": served if model == BASE else model, "prompt": prompts[prompt], "max_tokens": ANSWER_TOKENS,
                "temperature": 0, "ignore_eos": True, "return_token_ids": True}  # fmt: skip
        response = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=300)
        if response.status_code != 200:
            raise engine.fail(f"reference {key}: answered {response.status_code}: {response.text[:300]}")
        out[key] = [int(t) for t in response.json()["choices"][0]["token_ids"]]
    return out


def l2_read_bytes(engine: Engine, connector: str) -> float:
    text = httpx.get(f"{engine.url}/metrics", timeout=30).text
    if connector == "lmcache":
        return metric_sum(text, LMCACHE_L2_READ)
    return _labelled(text, "vllm:kv_offload_tiering_read_bytes_total", "tier").get("1:fs", 0.0)


def run_pair(
    run: PairRun, engines: tuple[Engine, Engine], prompts: dict[str, list[int]], served: str, l2_root: Path
) -> None:
    for phase in PHASES:
        started = time.monotonic()
        reads_before = l2_read_bytes(engines[1], run.connector)
        for step in (s for s in STEPS if s.phase == phase):
            run.answers[step.name] = ask(engines[step.engine], step, prompts[step.prompt], served, l2_root, run)
        if run.connector == "lmcache":  # LMCache publishes its counters every LMCACHE_PUBLISH_S
            time.sleep(LMCACHE_PUBLISH_S + 2)
        run.l2_read_bytes[phase] = l2_read_bytes(engines[1], run.connector) - reads_before
        run.timings_s[phase] = time.monotonic() - started


@dataclass
class Setup:
    """What every engine of the scenario is rendered and localized from."""

    workdir: Path
    config: Config
    endpoints: dict[str, Endpoint]  # connector -> the adapter endpoint
    model_dir: Path
    built: Path  # the adapters as tiny_adapters.py wrote them
    roots: dict[str, Path]  # connector -> the shared folder standing in for the LOB's Curvine volume

    def prepare(self, key: str, connector: str) -> tuple[str, render.Launch]:
        """Engine `key` of `connector`'s pair as kvtier renders it, localized; named `key` in reports."""
        rendered = render.standalone(self.config, LOB, self.endpoints[connector])
        private, root = self.workdir / f"root-{key}", self.roots[connector]
        if connector == "lmcache":
            rendered = replace(rendered, args=(*rendered.args, *ENGINE_EXTRA_ARGS))
            launch = render.localize(
                rendered,
                l2_root=root,
                private_root=private,
                model_dir=self.model_dir,
                port=free_port(),
                adapter_dir=ADAPTER_DIR,
            )
        else:
            launch = vllm_scenario.localize(rendered, l2_root=root, private_root=private, model_dir=self.model_dir)
        pod = f"{ENDPOINT}-engine-{key.lower()}"
        launch = with_adapters(launch, pod=pod, adapter_root=self.workdir / "adapters", built=self.built)
        return key, replace(launch, name=key)


def setup(python: str, workdir: Path, observed: IdentityObserved) -> Setup:
    config = load_checked(REPO / "config", ENV_NAME)
    model_dir, built = workdir / "model", workdir / "adapters-built"
    observed.timings_s["model_build"] = build_model(python, model_dir)
    observed.timings_s["adapters_build"] = build_adapters(python, model_dir, built)
    endpoints = {c: adapter_endpoint(config, c) for c in CONNECTORS}
    roots = {c: workdir / f"l2-{c}" for c in CONNECTORS}
    units = {"lmcache": endpoints["lmcache"].cache.chunk_size, "vllm": block_tokens(endpoints["vllm"])}
    for connector, unit in units.items():
        roots[connector].mkdir(parents=True, exist_ok=False)
        observed.pairs[connector] = PairRun(connector, unit, PROMPT_TOKENS // unit * unit)
    return Setup(workdir, config, endpoints, model_dir, built, roots)


def block_tokens(endpoint: Endpoint) -> int:
    """vLLM's block size as vLLM-CPU runs it (render.CPU_BLOCK_MULTIPLE)."""
    return -(-endpoint.block_size // render.CPU_BLOCK_MULTIPLE) * render.CPU_BLOCK_MULTIPLE


def lora_series(engine: Engine) -> list[str]:
    text = httpx.get(f"{engine.url}/metrics", timeout=30).text
    return [line for line in text.splitlines() if line.startswith("vllm:lora_requests_info{")]


# What Kubernetes keeps of a failed container's log as its termination message (FallbackToLogsOnError): the last 80
# lines, cut to their last 2,048 bytes (docs/references.md, issues 34 and 35).
TERMINATION_LINES, TERMINATION_BYTES = 80, 2048
EXIT_TIMEOUT_S = 600.0


def without_adapter(launch: render.Launch, name: str, empty: Path) -> render.Launch:
    """`launch` with adapter `name` loaded from `empty` (a folder with nothing in it)."""
    empty.mkdir(parents=True, exist_ok=True)
    args = [f"{name}={empty}" if a.startswith(f"{name}=") else a for a in launch.args]
    return replace(launch, args=tuple(args))


def run_check(python: str, spec: list[dict[str, Any]]) -> dict[str, Any]:
    """kvtier's adapter check as the pod's init container runs it (`python3 -c <script>`), in the engine's python."""
    done = subprocess.run(
        [python, "-c", script_text(ADAPTER_CHECK)],
        env={SPEC_VAR: json.dumps(spec)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return {"exit_code": done.returncode, "stdout": done.stdout.strip(), "stderr": done.stderr.strip()}


def missing_adapter(python: str, engine: Engine, good: Engine, s: Setup, empty: Path) -> dict[str, Any]:
    """Wait for M to stop (bounded), then what verify would show, and what the adapter check says on M's folders and
    on `good`'s (the real adapters)."""
    assert engine.proc is not None
    try:
        code = engine.proc.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise engine.fail(f"still running {EXIT_TIMEOUT_S:.0f} s after start with adapter {B} missing") from None
    with contextlib.suppress(ProcessLookupError):  # vLLM's workers of M, should any outlive it (its own group)
        os.killpg(engine.proc.pid, signal.SIGKILL)
    message = tail(engine.log, TERMINATION_LINES).encode()[-TERMINATION_BYTES:].decode(errors="replace")
    served = [dict(a, path=adapter_path(good.launch, a["name"])) for a in check_spec(s.endpoints["lmcache"])]
    localized = [dict(a, path=adapter_path(engine.launch, a["name"])) for a in served]
    return {
        "exit_code": code,
        "seconds": time.monotonic() - engine.started,
        "verify_line": why_it_failed(message),
        "check_missing": run_check(python, localized),
        "check_real": run_check(python, served),
    }


def identity_scenario(python: str, workdir: Path, router_site: Path | None) -> IdentityObserved:
    """The whole scenario; the router phase runs when `router_site` names the router's install folder."""
    total = time.monotonic()
    observed = IdentityObserved(breaks={k: os.environ[k] for k in BREAK_SWITCHES if os.environ.get(k)})
    s = setup(python, workdir, observed)
    prompts = {name: prompt_ids(seed) for name, seed in PROMPT_SEEDS.items()}
    served = s.endpoints["lmcache"].model.id
    timings = observed.timings_s
    shm_before = set(vllm_scenario.SHM.glob(vllm_scenario.SHM_FILE))
    try:
        with Engines(python, workdir, served, STARTUP_TIMEOUT_S) as group:
            started = time.monotonic()
            empty = workdir / "adapters-empty" / B / ADAPTER_VERSION
            key, launch = s.prepare("M", "lmcache")
            (broken,) = group.launch([(key, without_adapter(launch, B, empty))])
            key, launch = s.prepare("R", "lmcache")
            reference, l1, l2 = group.start(
                [(key, without_cache(launch)), s.prepare("L1", "lmcache"), s.prepare("L2", "lmcache")]
            )
            observed.missing_adapter = missing_adapter(python, broken, l1, s, empty)
            timings["start_reference_and_lmcache_pair"] = time.monotonic() - started
            started = time.monotonic()
            observed.references = reference_tokens(reference, prompts, served)
            timings["references"] = time.monotonic() - started
            group.stop(reference)
            started = time.monotonic()
            vllm_pair = group.launch([s.prepare("V1", "vllm"), s.prepare("V2", "vllm")])  # starts during LMCache's
            lmcache = observed.pairs["lmcache"]
            lmcache.adapter_paths = {e.name: adapter_path(e.launch, A) for e in (l1, l2)}
            run_pair(lmcache, (l1, l2), prompts, served, s.roots["lmcache"])
            observed.lora_series = {e.name: lora_series(e) for e in (l1, l2)}
            if router_site is not None:
                routed = time.monotonic()
                models = {BASE: served, **{a: a for a in ADAPTERS}}
                block = block_tokens(s.endpoints["lmcache"])
                observed.routing = adapter_routing(python, router_site, workdir, {"1": l1, "2": l2}, models, block)
                timings["routing"] = time.monotonic() - routed
            group.stop(l1)
            group.stop(l2)
            v1, v2 = group.wait(vllm_pair)
            timings["start_vllm_pair_after_lmcache_phases"] = time.monotonic() - started
            vllm = observed.pairs["vllm"]
            vllm.adapter_paths = {e.name: adapter_path(e.launch, A) for e in (v1, v2)}
            run_pair(vllm, (v1, v2), prompts, served, s.roots["vllm"])
            timings |= {f"ready_{e.name}": e.ready_s or 0.0 for e in (reference, l1, l2, v1, v2)}
    finally:
        for leftover in set(vllm_scenario.SHM.glob(vllm_scenario.SHM_FILE)) - shm_before:
            leftover.unlink(missing_ok=True)  # vLLM's CPU tier file, when its worker died before unmapping it
    timings["scenario"] = time.monotonic() - total
    return observed


def to_json(observed: IdentityObserved) -> str:
    return json.dumps(observed, default=lambda o: o.__dict__, indent=2, sort_keys=True)
