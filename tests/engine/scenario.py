"""The real-engine scenario: what runs, in which order, and what is observed; the assertions live in checks.py.

It runs as a phase on the session's shared engines (lmcache_replicas.py): A and B, two replicas of the example's
standalone endpoint, and C, A's rendering started with another PYTHONHASHSEED. A gets a ~1,000-token prompt of this
phase's own (cold, it stores to L2), then B and C get the same tokens. `kvtier bench sweep` then runs A -> B, and
`kvtier verify --probe`'s probe runs over A and B (a hit) and over A and C (a miss it must explain). Then two engines
of this phase's own start next to them, one at a time: E, an operator pod of the same endpoint as the LOB's Kyverno
Policy rewires it, and D, the endpoint with a differing model identity; each gets the same prompt, then stops. Last,
the janitor's one-shot mode runs over the real L2 directory.

`KVTIER_ENGINE_BREAK` (hash-seed, l2-url or chunk-size) makes kvtier render a deliberately wrong value before the
settings are taken (for the shared engines too: lmcache_replicas.py reads it), to show that the checks notice
(docs/development.md); it is never set in CI.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtier import serving
from kvtier.bench.prompts import VOCAB
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import lmcache
from kvtier.ops.probe import Pod, ProbeTiming, probe_all
from tests.engine import render
from tests.engine.engines import Engine, EngineError

if TYPE_CHECKING:
    from tests.engine.lmcache_replicas import Replicas

REPO = Path(__file__).resolve().parents[2]
ADAPTER_DIR = Path(__file__).resolve().parent / "adapter"
JANITOR = REPO / "kvtier" / "k8s" / "curvine" / "scripts" / "l2_janitor.py"
ENV_NAME, LOB, ENDPOINT = "prod", "support", "llama31-8b"  # the example's standalone endpoint with l2: curvine
PROMPT_TOKENS = 1000
MODEL_SEED = 20261201
STARTUP_TIMEOUT_S = float(os.environ.get("KVTIER_ENGINE_STARTUP_S", "600"))
STORE_TIMEOUT_S = 120.0
BREAKS = ("hash-seed", "l2-url", "chunk-size")
HIT_LINE = re.compile(r"LMCache hit tokens: (\d+)")
RETRIEVED_LINE = re.compile(r"Retrieved (\d+) out of (\d+) required tokens")
STORED_LINE = re.compile(r"Stored (\d+) out of total (\d+) tokens")
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"


@dataclass
class Reading:
    """What one engine showed for one request."""

    engine: str
    prompt_tokens: int
    cached_tokens: int
    lmcache_hit_tokens: list[int]
    retrieved_tokens: list[int]
    stored_tokens: list[int]
    external_hits_delta: float
    new_l2_files: list[str]
    l2_dir: str | None
    answer_ms: float = 0.0  # POST -> the whole `max_tokens: 1` answer: the request's TTFT, seen by the client


@dataclass
class Observed:
    """Everything the checks look at, plus the timings the report prints."""

    chunk_size: int  # the endpoint's `cache.chunk_size` in the config, not what kvtier rendered
    full_chunk_tokens: int
    urls: dict[str, str] = field(default_factory=dict)  # engine -> the remote_url kvtier rendered
    readings: dict[str, Reading] = field(default_factory=dict)
    janitor: list[dict[str, Any]] = field(default_factory=list)
    janitor_expect: dict[str, list[str]] = field(default_factory=dict)
    bench: dict[str, Any] = field(default_factory=dict)
    probe: dict[str, dict[str, Any]] = field(default_factory=dict)  # "replicas" (A, B), "other_seed" (A, C)
    timings_s: dict[str, float] = field(default_factory=dict)
    machine_fit: tuple[str, ...] = render.MACHINE_FIT


def corpus(seed: int) -> list[str]:
    """Tokenizer training text: the benchmark's words in seeded order (so each becomes about one token), then
    made-up words."""
    rng = random.Random(f"kvtier-engine-corpus:{seed}")
    letters = "abcdefghijklmnopqrstuvwxyz"

    def filler() -> str:  # made-up words, so byte-pair merges fill the whole vocabulary
        return "".join(rng.choice(letters) for _ in range(rng.randrange(3, 9)))

    return [" ".join([*(rng.choice(VOCAB) for _ in range(40)), *(filler() for _ in range(10))]) for _ in range(3000)]


def prompt_ids(seed: int | str, count: int = PROMPT_TOKENS) -> list[int]:
    """`count` token ids drawn from `seed`: the same seed, the same ids (a shorter count is a prefix of a longer)."""
    rng = random.Random(f"kvtier-engine-prompt:{seed}")
    return [rng.randrange(3, 2048) for _ in range(count)]  # 0-2 are the special tokens


_BUILT: dict[tuple[int, str], Path] = {}  # (seed, kind) -> the first folder this process built the tiny model into


def _has_model(folder: Path) -> bool:
    return (folder / "config.json").exists() and (folder / "model.safetensors").exists()


def build_model(python: str, out: Path, kind: str = "dense") -> float:
    """Build the tiny model (tiny_model.py's `kind`) into `out`, once per test session and kind: the build is
    deterministic from MODEL_SEED, so a later call copies the first build's folder (a few MB) instead of training the
    tokenizer and writing the weights again; a model already in `out` (a reused KVTIER_ENGINE_WORKDIR) is kept."""
    if _has_model(out):
        return 0.0
    started = time.monotonic()
    first = _BUILT.get((MODEL_SEED, kind))
    if first is not None and _has_model(first):
        shutil.copytree(first, out, dirs_exist_ok=True)
        return time.monotonic() - started
    corpus_file = out.parent / "corpus.txt"
    corpus_file.write_text("\n".join(corpus(MODEL_SEED)), encoding="utf-8")
    run_builder(python, "tiny_model.py", [str(out), str(MODEL_SEED), str(corpus_file), kind], f"the tiny {kind} model")
    _BUILT[(MODEL_SEED, kind)] = out
    return time.monotonic() - started


def run_builder(python: str, script: str, args: list[str], what: str) -> None:
    """Run one of this folder's build scripts in the engine venv, offline and bounded; EngineError if it fails."""
    path = Path(__file__).resolve().parent / script
    try:
        done = subprocess.run(
            [python, str(path), *args],
            capture_output=True,
            text=True,
            timeout=600,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EngineError(f"building {what} took over 600 s") from None
    if done.returncode != 0:
        raise EngineError(f"building {what} failed: {(done.stderr or done.stdout).strip()[-2000:]}")


@contextmanager
def broken(what: str | None) -> Iterator[None]:
    """kvtier renders a wrong value while the settings are taken (the self-check of the checks)."""
    if what is None:
        yield
        return
    if what not in BREAKS:
        raise ValueError(f"KVTIER_ENGINE_BREAK={what!r}: use one of {', '.join(BREAKS)}")
    # The LMCache connector module renders every LMCache setting (the ConfigMap, the operator env and the Kyverno
    # rewiring: kvtier/connectors/lmcache.py); the seed is the one both share (kvtier/serving.py).
    saved = serving.HASH_SEED, lmcache.l2_dir_url, lmcache.lmcache_config
    original_config = lmcache.lmcache_config
    try:
        if what == "hash-seed":
            # Python then picks a per-process seed, as with none at all
            serving.HASH_SEED = "random"
        elif what == "l2-url":
            # Every L2 URL kvtier renders (ConfigMap, operator env, Kyverno rewiring) comes from l2_dir_url.
            lmcache.l2_dir_url = lambda subdir, *a, **k: f"fs://localhost:0/var/cache/kvtier-l2/{subdir}/"
        else:

            def doubled(*args: Any, **kwargs: Any) -> dict[str, Any]:
                config = original_config(*args, **kwargs)
                return config | {"chunk_size": config["chunk_size"] * 2} if config else config

            lmcache.lmcache_config = doubled
        yield
    finally:
        serving.HASH_SEED, lmcache.l2_dir_url, lmcache.lmcache_config = saved


def other_identity(endpoint: Endpoint) -> tuple[Endpoint, str]:
    """The endpoint with a differing model identity: another `weights_version` where kvtier has one, else (no identity
    directory yet) the same model under another endpoint name, which kvtier gives another L2 directory."""
    model = endpoint.model
    if "weights_version" in type(model).model_fields:
        changed = model.model_copy(update={"weights_version": f"{getattr(model, 'weights_version', None)}-other"})
        return endpoint.model_copy(update={"model": changed}), "another weights_version"
    return endpoint.model_copy(update={"name": f"{endpoint.name}-v2"}), "another endpoint name (no identity in kvtier)"


@dataclass(frozen=True)
class Renderings:
    replica: render.Rendered
    operator: render.Rendered
    identity: render.Rendered
    identity_how: str


def renderings(config: Config, break_what: str | None) -> Renderings:
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    other, how = other_identity(endpoint)
    with broken(break_what):
        return Renderings(
            render.standalone(config, LOB, endpoint),
            render.operator_pod(config, LOB, endpoint),
            render.standalone(config, LOB, other),
            how,
        )


def l2_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def ask(
    engine: Engine, prompt: list[int], l2_root: Path, *, wait_store: bool, extra: dict[str, Any] | None = None
) -> Reading:
    before_files = l2_files(l2_root)
    before_hits = engine.metric(EXTERNAL_HITS)
    engine.new_log()
    sent = time.perf_counter()
    body = engine.complete(prompt, extra=extra)
    answer_ms = (time.perf_counter() - sent) * 1000
    log = engine.new_log()
    if wait_store:  # LMCache stores after the forward pass; wait for its line, then for the files (bounded)
        deadline = time.monotonic() + STORE_TIMEOUT_S
        while not STORED_LINE.search(log) and time.monotonic() < deadline:
            time.sleep(1)
            log += engine.new_log()
        time.sleep(3)
        log += engine.new_log()
    usage = body.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Reading(
        engine=engine.name,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens") or 0),
        lmcache_hit_tokens=[int(n) for n in HIT_LINE.findall(log)],
        retrieved_tokens=[int(n) for n, _ in RETRIEVED_LINE.findall(log)],
        stored_tokens=[int(n) for n, _ in STORED_LINE.findall(log)],
        external_hits_delta=engine.metric(EXTERNAL_HITS) - before_hits,
        new_l2_files=sorted(l2_files(l2_root) - before_files),
        l2_dir=str(engine.launch.l2_dir) if engine.launch.l2_dir else None,
        answer_ms=answer_ms,
    )


def run_bench(a: Engine, b: Engine, out: Path) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "kvtier", "bench", "sweep", "--write-url", a.url, "--read-url", b.url,
        "--lengths", "1000,2000", "--out", str(out), "--no-plots", "--no-progress", "--timeout-s", "300",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=REPO)
    if done.returncode != 0:
        raise EngineError(f"kvtier bench sweep exited {done.returncode}: {(done.stderr or done.stdout)[-1500:]}")
    result: dict[str, Any] = json.loads((out / "result.json").read_text(encoding="utf-8"))
    return result


class EnginePods:
    """`kvtier verify --probe`'s pod access over local engines: each engine is one ready pod on a node of its own,
    reached at its URL (what the port-forward gives on a cluster)."""

    def __init__(self, engines: dict[str, Engine]) -> None:
        self.engines = engines  # pod name -> engine

    def pods(self, lob: str, endpoint: str) -> list[Pod]:  # noqa: ARG002 (PodAccess's signature; one endpoint)
        return [Pod(name, f"node-{name}", True) for name in self.engines]

    @asynccontextmanager
    async def connect(self, lob: str, pod: Pod) -> AsyncIterator[str]:  # noqa: ARG002 (PodAccess's signature)
        yield self.engines[pod.name].url


def run_probe(engines: dict[str, Engine]) -> dict[str, Any]:
    """The probe of `kvtier verify --probe` for the example endpoint over two engines (the first name writes)."""
    access = EnginePods(engines)
    timing = ProbeTiming(store_wait_s=STORE_TIMEOUT_S)  # the CLI's settle time: LMCache's own publication interval
    report = asyncio.run(probe_all(ENV_NAME, [(LOB, ENDPOINT)], access, timing=timing))
    return report.to_json() | {"exit_code": int(report.exit_code)}


def run_janitor(root: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(JANITOR), str(root), "--once", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise EngineError(f"the janitor exited {done.returncode}: {done.stderr.strip()[-800:]}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def janitor_pass(config: Config, l2_root: Path, observed: Observed) -> None:
    """Age the orphan files (what the other-seed engine wrote) past the LOB's max age, add a stale and a young
    temporary file, and run the one-shot janitor with the LOB's own limits: the orphans and the stale temporary
    file go, everything young stays. Then a budget below what is left: the oldest go first."""
    lob = config.lob(LOB)
    now = time.time()
    old = now - (lob.l2.max_age_hours + 1) * 3600
    orphans = observed.readings["C"].new_l2_files if "C" in observed.readings else []
    for name in orphans:
        os.utime(l2_root / name, (old, old))
    work_dir = l2_root / ENDPOINT
    work_dir.mkdir(parents=True, exist_ok=True)
    stale, young = work_dir / "interrupted.data.tmp", work_dir / "writing.data.tmp"
    stale.write_bytes(b"x" * 1000)
    young.write_bytes(b"x" * 1000)
    os.utime(stale, (now - 2 * 3600, now - 2 * 3600))
    before = l2_files(l2_root)
    observed.janitor_expect = {
        "deleted": sorted([*orphans, str(stale.relative_to(l2_root))]),
        "kept": sorted(before - {*orphans, str(stale.relative_to(l2_root))}),
    }
    first = run_janitor(
        l2_root, "--budget-gb", str(lob.l2.budget_gb), "--max-age-hours", str(lob.l2.max_age_hours), "--now", str(now)
    )
    first["remaining"] = sorted(l2_files(l2_root))
    observed.janitor.append(first)
    left = l2_files(l2_root)
    mtimes = {name: (l2_root / name).stat().st_mtime for name in left}
    size = sum((l2_root / name).stat().st_size for name in left)
    budget_gb = size / 2 / 1000**3  # half of what is left
    second = run_janitor(l2_root, "--budget-gb", f"{budget_gb:.12f}", "--max-age-hours", "1000", "--now", str(now))
    second["remaining"] = sorted(l2_files(l2_root))
    second["mtimes"] = mtimes
    second["budget_bytes_asked"] = size / 2
    observed.janitor.append(second)


def scenario(group: Replicas, *, replicas_only: bool = False) -> Observed:
    """The whole scenario on the shared engines, or with `replicas_only` just A and B (the quick self-check of a wrong
    setting)."""
    total = time.monotonic()
    chunk = group.endpoint.cache.chunk_size
    observed = Observed(chunk_size=chunk, full_chunk_tokens=PROMPT_TOKENS // chunk * chunk)
    observed.timings_s |= {"model_build": group.timings_s["model_build"], "phase1_start": group.timings_s["start"]}
    prompt = prompt_ids(f"{group.phase('real-engines')}:0")
    l2_root, rendered = group.l2_root, group.renderings
    a, b, c = (group.engines[k] for k in "ABC")
    observed.urls = dict.fromkeys("ABC", group.replica.l2_url)
    observed.readings["A"] = ask(a, prompt, l2_root, wait_store=True)
    observed.readings["B"] = ask(b, prompt, l2_root, wait_store=False)
    if replicas_only:
        observed.timings_s["scenario"] = time.monotonic() - total
        return observed
    observed.readings["C"] = ask(c, prompt, l2_root, wait_store=True)
    started = time.monotonic()
    observed.bench = run_bench(a, b, group.workdir / "bench")
    observed.timings_s["bench"] = time.monotonic() - started
    started = time.monotonic()
    observed.probe = {"replicas": run_probe({"A": a, "B": b}), "other_seed": run_probe({"A": a, "C": c})}
    observed.timings_s["probe"] = time.monotonic() - started
    observed.urls |= {
        "E": rendered.operator.l2_url,
        "D": rendered.identity.l2_url,
        "identity_how": rendered.identity_how,
    }
    own: dict[str, Engine] = {}
    # One at a time beside A, B and C (about 4 GB each: four engines at most), each stopped once it answered.
    for key, what, wait_store in (("E", rendered.operator, False), ("D", rendered.identity, True)):
        (own[key],) = group.start([group.launch(key, what)])
        observed.readings[key] = ask(own[key], prompt, l2_root, wait_store=wait_store)
        own[key].stop()
    observed.timings_s["phase2_start"] = sum(e.ready_s or 0.0 for e in own.values())
    ready = zip("ABCED", [a, b, c, own["E"], own["D"]], strict=True)
    observed.timings_s.update({f"ready_{k}": v.ready_s or 0.0 for k, v in ready})
    janitor_pass(group.config, l2_root, observed)
    observed.timings_s["scenario"] = time.monotonic() - total
    return observed
