"""A rollout across identities with real engines (issue 34): an old ReplicaSet's pod that restarts after the deploy
still reads and writes its own identity's L2 directory, and the new identity's first engine starts cold.

What Kubernetes does is played here by two small stand-ins, and nothing else changes from kvtier's rendering
(`render.localize` turns a container into a process on this machine, as every engine test does):
- `ConfigMaps`, the API server's ConfigMaps of the LOB's namespace: an apply writes every ConfigMap the deploy renders
  in place (same name, new data) and deletes the ones this apply no longer renders (CDK's `KubernetesManifest` with
  prune, kvtier/constructs/manifests.py);
- `Pod`, one pod of a ReplicaSet: its container (args, env) is fixed when the ReplicaSet is made (the pod template);
  its ConfigMap volumes are read from `ConfigMaps` each time the container starts, as the kubelet projects a mounted
  ConfigMap's current data (Kubernetes "Mounted ConfigMaps are updated automatically"). A ConfigMap that is gone
  stops the start (a replacement pod of the old ReplicaSet could not start; a restarted container would keep stale
  files and lose them with the pod).

The steps, with the example's standalone endpoint (prod/support/llama31-8b), identity A, then B (its weights
re-uploaded: another `weights_version`):
1. deploy A; pod A1 of A's ReplicaSet starts and gets prompt P (cold: LMCache stores its chunks in A's directory);
2. deploy B (the apply rewrites and prunes as above); A1's container restarts (same pod spec, volumes re-read);
3. the restarted A1 gets P again (its GPU and CPU caches are gone, so only A's L2 directory can hit) and a new prompt
   Q (its chunks must land in A's directory, never in B's);
4. B's first engine B1 starts from B's rendering and gets Q and P: 0 hit tokens (nothing of A's reaches it).
Last, `kvtier verify --probe --isolation`'s check runs on B1 alone (one pod: salt X twice, then salt Y and no salt,
each judged by its own cached tokens): with kvtier's connector it holds; with `KVTIER_SALT_BREAK=1` in the engines'
environment (the connector then sets no salt tag) it must report the leak.
`KVTIER_ROLLOUT_BREAK=1` renders the settings into the ConfigMap as before issue 34 (the apply rewrites them in place):
the restarted A1 then comes back on B's directory and the checks fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvtier.bench.testserver import free_port
from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.connectors import l2_subdir
from kvtier.connectors.lmcache import ROLLOUT_BREAK
from kvtier.k8s.standalone import engine_config_map, engine_deployment
from kvtier.ops.probe import Check, ProbeTiming, run_check
from kvtier.rules import load_checked
from tests.engine import render
from tests.engine.engines import EngineError, Engines
from tests.engine.scenario import (
    ADAPTER_DIR,
    ENDPOINT,
    ENV_NAME,
    LOB,
    MODEL_SEED,
    PROMPT_TOKENS,
    REPO,
    STARTUP_TIMEOUT_S,
    STORE_TIMEOUT_S,
    Reading,
    ask,
    build_model,
    prompt_ids,
)

BREAKS = ("1",)
NEW_WEIGHTS_VERSION = "2026-12-06"  # B: the same model id and revision, its weights re-uploaded


class ConfigMaps:
    """The namespace's ConfigMaps: name -> data, as the last apply left them."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, str]] = {}
        self.applies: list[dict[str, Any]] = []  # what each apply wrote and pruned, for the report

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Write every rendered ConfigMap in place; delete the ones this apply does not render (prune)."""
        rendered = {o["metadata"]["name"]: dict(o.get("data", {})) for o in objects if o["kind"] == "ConfigMap"}
        pruned = sorted(set(self.data) - set(rendered))
        rewritten = sorted(n for n in rendered if n in self.data and self.data[n] != rendered[n])
        for name in pruned:
            del self.data[name]
        self.data.update(rendered)
        self.applies.append({"applied": sorted(rendered), "rewritten": rewritten, "pruned": pruned})


@dataclass(frozen=True)
class Pod:
    """One pod: its container as the ReplicaSet's template fixed it, and the ConfigMaps its volumes mount."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    mounts: dict[str, str]  # mount path -> ConfigMap name

    def container(self, config_maps: ConfigMaps) -> render.Rendered:
        """The container as it starts now: the template's args and env, the volumes' current files."""
        files: dict[str, str] = {}
        for mount, name in self.mounts.items():
            if name not in config_maps.data:
                raise EngineError(f"{self.name}: ConfigMap {name} is gone (pruned): the pod cannot start")
            files |= {f"{mount}/{key}": text for key, text in config_maps.data[name].items()}
        return render.Rendered(self.name, self.args, dict(self.env), files)


def deploy(config: Config, endpoint: Endpoint) -> tuple[list[dict[str, Any]], Pod]:
    """What one deploy renders for the endpoint: the objects applied, and a pod of its ReplicaSet."""
    deployment = engine_deployment(config.env, LOB, endpoint)
    spec = deployment["spec"]["template"]["spec"]
    container = spec["containers"][0]
    volumes = {v["name"]: v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"] if m["name"] in volumes}
    env = {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}
    config_map = engine_config_map(LOB, endpoint)
    objects = [deployment] if config_map is None else [config_map, deployment]
    return objects, Pod(f"{endpoint.name} ({l2_subdir(endpoint)})", tuple(container["args"]), env, mounts)


def identity_b(endpoint: Endpoint) -> Endpoint:
    model = endpoint.model.model_copy(update={"weights_version": NEW_WEIGHTS_VERSION})
    return endpoint.model_copy(update={"model": model})


@dataclass
class RolloutObserved:
    chunk_size: int
    full_chunk_tokens: int
    dir_a: str  # the identity directories, relative to the L2 root
    dir_b: str
    applies: list[dict[str, Any]] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)  # engine -> the L2 URL it started with (LMCache's settings)
    readings: dict[str, Reading] = field(default_factory=dict)
    isolation: dict[str, Any] = field(default_factory=dict)  # the isolation probe's result on B1
    timings_s: dict[str, float] = field(default_factory=dict)


def _check_break(break_what: str | None) -> None:
    if break_what not in (None, *BREAKS):
        raise ValueError(f"{ROLLOUT_BREAK}={break_what!r}: use one of {', '.join(BREAKS)}")


def _deploys(
    config: Config, endpoints: tuple[Endpoint, ...], break_what: str | None
) -> list[tuple[list[dict[str, Any]], Pod]]:
    """Each endpoint's deploy, rendered with the break switch set while kvtier renders (and only then)."""
    saved = os.environ.get(ROLLOUT_BREAK)
    if break_what:
        os.environ[ROLLOUT_BREAK] = break_what
    try:
        return [deploy(config, e) for e in endpoints]
    finally:
        if saved is None:
            os.environ.pop(ROLLOUT_BREAK, None)
        else:
            os.environ[ROLLOUT_BREAK] = saved


def isolation_check(endpoint: Endpoint, url: str) -> dict[str, Any]:
    """`kvtier verify --probe --isolation`'s check on one engine (its own pod A)."""
    timing = ProbeTiming(store_wait_s=STORE_TIMEOUT_S)
    return asdict(asyncio.run(run_check(Check(LOB, endpoint), ("B1", None), url, None, timing=timing)))


def rollout(python: str, workdir: Path, break_what: str | None) -> RolloutObserved:
    _check_break(break_what)
    total = time.monotonic()
    config = load_checked(REPO / "config", ENV_NAME)
    a = render.endpoint_of(config, LOB, ENDPOINT)
    b = identity_b(a)
    chunk = a.cache.chunk_size
    observed = RolloutObserved(chunk, PROMPT_TOKENS // chunk * chunk, l2_subdir(a), l2_subdir(b))
    observed.timings_s["model_build"] = build_model(python, workdir / "model")
    l2_root = workdir / "l2"  # stands in for the LOB's Curvine volume
    l2_root.mkdir(exist_ok=False)
    (objects_a, pod_a), (objects_b, pod_b) = _deploys(config, (a, b), break_what)
    config_maps = ConfigMaps()
    ports = {"A1": free_port(), "B1": free_port()}

    def launch(key: str, pod: Pod) -> tuple[str, render.Launch]:
        container = pod.container(config_maps)
        observed.urls[key] = container.l2_url
        private = workdir / f"root-{key}"
        shutil.rmtree(private, ignore_errors=True)  # a restarted container starts from its image again
        return key, render.localize(
            container,
            l2_root=l2_root,
            private_root=private,
            model_dir=workdir / "model",
            port=ports[key[:2]],
            adapter_dir=ADAPTER_DIR,
        )

    p, q = prompt_ids(MODEL_SEED), prompt_ids(MODEL_SEED + 1)
    with Engines(python, workdir, a.model.id, STARTUP_TIMEOUT_S) as group:
        config_maps.apply(objects_a)
        started = time.monotonic()
        (a1,) = group.start([launch("A1", pod_a)])
        observed.timings_s["start_a1"] = time.monotonic() - started
        observed.readings["A1 P"] = ask(a1, p, l2_root, wait_store=True)
        config_maps.apply(objects_b)  # the new revision's deploy
        group.stop(a1)  # the container exits (liveness, OOM, a GPU fault): the kubelet starts it again
        started = time.monotonic()
        (restarted,) = group.start([launch("A1 restarted", pod_a)])
        observed.timings_s["restart_a1"] = time.monotonic() - started
        observed.readings["A1 restarted P"] = ask(restarted, p, l2_root, wait_store=False)
        observed.readings["A1 restarted Q"] = ask(restarted, q, l2_root, wait_store=True)
        started = time.monotonic()
        (b1,) = group.start([launch("B1", pod_b)])
        observed.timings_s["start_b1"] = time.monotonic() - started
        observed.readings["B1 Q"] = ask(b1, q, l2_root, wait_store=True)
        observed.readings["B1 P"] = ask(b1, p, l2_root, wait_store=False)
        started = time.monotonic()
        observed.isolation = isolation_check(b, b1.url)
        observed.timings_s["isolation_probe"] = time.monotonic() - started
    observed.applies = config_maps.applies
    observed.timings_s["total"] = time.monotonic() - total
    return observed


# --- checks, plain functions of what was observed (test_rollout.py also runs them on what a broken rollout shows) ---


def _data(files: list[str]) -> list[str]:
    return [f for f in files if f.endswith(".data")]


def _under(files: list[str], directory: str) -> list[str]:
    return [f for f in files if f.startswith(directory.rstrip("/") + "/")]


def first_engine_stored_in_its_directory(observed: RolloutObserved) -> None:
    r = observed.readings["A1 P"]
    chunks = observed.full_chunk_tokens // observed.chunk_size
    written = _data(r.new_l2_files)
    assert r.lmcache_hit_tokens in ([0], []), f"A1's first request was not cold: {r.lmcache_hit_tokens}"
    assert len(_under(written, observed.dir_a)) == chunks == len(written), (
        f"A1 stored {written}, expected {chunks} chunk files in {observed.dir_a}"
    )


def restarted_old_pod_keeps_its_url(observed: RolloutObserved) -> None:
    before, after = observed.urls["A1"], observed.urls["A1 restarted"]
    assert after == before, (
        f"after the deploy of B the restarted A1 came back with L2 URL {after}, not its own {before}: its settings "
        "are not in its pod template"
    )


def restarted_old_pod_reads_its_directory(observed: RolloutObserved) -> None:
    r = observed.readings["A1 restarted P"]
    full = observed.full_chunk_tokens
    assert r.lmcache_hit_tokens == [full], (
        f"the restarted A1 found {r.lmcache_hit_tokens} of P's tokens in LMCache, expected [{full}] from its own "
        f"directory {observed.dir_a}"
    )


def restarted_old_pod_writes_its_directory(observed: RolloutObserved) -> None:
    written = _data(observed.readings["A1 restarted Q"].new_l2_files)
    chunks = observed.full_chunk_tokens // observed.chunk_size
    in_b = _under(written, observed.dir_b)
    assert not in_b, f"the restarted A1 (old weights) wrote {len(in_b)} chunk files into B's directory: {in_b}"
    assert len(_under(written, observed.dir_a)) == chunks == len(written), (
        f"the restarted A1 stored {written}, expected {chunks} chunk files in {observed.dir_a}"
    )


def new_identity_starts_cold(observed: RolloutObserved) -> None:
    for name in ("B1 Q", "B1 P"):
        r = observed.readings[name]
        hits = sum(r.lmcache_hit_tokens) + sum(r.retrieved_tokens)
        assert hits == 0 and r.cached_tokens == 0 and r.external_hits_delta == 0, (
            f"{name}: B's first engine took {r.lmcache_hit_tokens or [0]} LMCache hit tokens, "
            f"{r.cached_tokens} cached tokens from another identity's KV"
        )
    written = _data(observed.readings["B1 Q"].new_l2_files)
    assert written and not _under(written, observed.dir_a), f"B1 wrote {written}, expected files in {observed.dir_b}"


def isolation_probe_holds(observed: RolloutObserved) -> None:
    result = observed.isolation
    cached = [(r["step"], r["cached_tokens"]) for r in result.get("requests", [])]
    assert result.get("outcome") == "isolated", (
        f"verify --probe --isolation on B1: {result.get('outcome')}: {result.get('message')} (requests {cached})"
    )
