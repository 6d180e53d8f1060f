"""The real-engine harness without engines (fast, in `make test`): the settings it takes from kvtier, the wrong values
it can inject, its checks on fake observations, its process handling and its venv builder's fail-fast paths."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

from kvtier import serving
from kvtier.config.loader import Config
from kvtier.connectors import l2_subdir, lmcache
from kvtier.rules import load_checked
from tests.engine import checks, render
from tests.engine.engines import EngineError, Engines, group_alive, metric_sum
from tests.engine.fake_engine import server_folder
from tests.engine.scenario import BREAKS, ENDPOINT, ENV_NAME, LOB, Observed, Reading, renderings
from tests.engine.venv import VenvError, local_wheel_dir, pip_find_links, probe, torch_pin, torch_source, venv_key
from tests.support import CONFIG_DIR


@pytest.fixture(scope="module")
def config() -> Config:
    return load_checked(CONFIG_DIR, ENV_NAME)


def _launch(rendered: render.Rendered, tmp_path: Path) -> render.Launch:
    return render.localize(
        rendered,
        l2_root=tmp_path / "l2",
        private_root=tmp_path / "root",
        model_dir=tmp_path / "model",
        port=12345,
        adapter_dir=tmp_path / "adapter",
    )


def test_standalone_settings_are_kvtiers_own(config: Config, tmp_path: Path) -> None:
    """The engine gets the env (every LMCache setting a `LMCACHE_*` variable: issue 34) and the ConfigMap file
    kvtier renders; only the mount root and L1 size change."""
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    rendered = render.standalone(config, LOB, endpoint)
    settings = lmcache.lmcache_config(endpoint.cache, l2_subdir(endpoint))
    assert rendered.lmcache == {key: lmcache.env_value(value) for key, value in settings.items()}
    assert rendered.env["PYTHONHASHSEED"] == serving.HASH_SEED
    launch = _launch(rendered, tmp_path)
    assert launch.l2_dir is not None
    assert launch.l2_dir.is_relative_to(tmp_path / "l2")
    assert not [p for p in launch.files if p.suffix == ".yaml"]  # no settings file: the pod template has them
    # kvtier's connector module (issue 24) is written as rendered, in the folder its PYTHONPATH names here
    (module,) = [p for p in launch.files if p.suffix == ".py"]
    assert module.is_relative_to(tmp_path / "root")
    assert launch.files[module] == rendered.files[f"{lmcache.CONFIG_DIR}/{module.name}"]
    assert launch.env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path / "adapter"), str(module.parent)]
    unchanged = {k: v for k, v in launch.env.items() if k.startswith("LMCACHE_") and k in rendered.env}
    unchanged = {k: v for k, v in unchanged.items() if k not in (lmcache.REMOTE_URL, "LMCACHE_MAX_LOCAL_CPU_SIZE")}
    assert unchanged == {k: rendered.env[k] for k in unchanged}
    assert launch.env[lmcache.REMOTE_URL] == f"fs://localhost:0{launch.l2_dir}/"
    assert launch.env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == str(render.L1_GIB)
    assert launch.args[launch.args.index("--model") + 1] == str(tmp_path / "model")
    assert launch.env["PROMETHEUS_MULTIPROC_DIR"].startswith(str(tmp_path / "root"))


def test_operator_pod_gets_the_kyverno_rewiring(config: Config, tmp_path: Path) -> None:
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    rendered = render.operator_pod(config, LOB, endpoint)
    assert rendered.l2_url == render.standalone(config, LOB, endpoint).l2_url
    assert rendered.env["LMCACHE_REMOTE_SERDE"] == lmcache.SERDE
    assert rendered.env["PYTHONHASHSEED"] == serving.HASH_SEED
    assert _launch(rendered, tmp_path).l2_dir is not None


def test_every_break_changes_what_the_engines_get(config: Config, tmp_path: Path) -> None:
    """Each deliberately wrong value reaches the engines' settings, and the settings are restored afterwards."""
    good = renderings(config, None)
    for what in BREAKS:
        bad = renderings(config, what)
        if what == "hash-seed":
            assert bad.replica.env["PYTHONHASHSEED"] == "random" != good.replica.env["PYTHONHASHSEED"]
            assert bad.operator.env["PYTHONHASHSEED"] == "random"
        elif what == "l2-url":
            assert _launch(bad.replica, tmp_path).l2_dir is None
            assert _launch(bad.operator, tmp_path).l2_dir is None
        else:
            assert int(bad.replica.lmcache["chunk_size"]) == 2 * int(good.replica.lmcache["chunk_size"])
            assert int(bad.operator.lmcache["chunk_size"]) == 2 * int(good.operator.lmcache["chunk_size"])
    assert renderings(config, None) == good
    with pytest.raises(ValueError, match="KVTIER_ENGINE_BREAK"):
        renderings(config, "nonsense")


def test_identity_variant_renders_another_directory(config: Config) -> None:
    rendered = renderings(config, None)
    assert rendered.identity.l2_url != rendered.replica.l2_url


def _reading(engine: str, hits: int, *, files: list[str] | None = None, l2_dir: str | None = "/l2/ep") -> Reading:
    return Reading(
        engine=engine,
        prompt_tokens=1000,
        cached_tokens=hits,
        lmcache_hit_tokens=[hits],
        retrieved_tokens=[hits] if hits else [],
        stored_tokens=[],
        external_hits_delta=float(hits),
        new_l2_files=files or [],
        l2_dir=l2_dir,
    )


def _observed(**readings: Reading) -> Observed:
    return Observed(chunk_size=256, full_chunk_tokens=768, readings=dict(readings))


def test_checks_pass_on_a_good_run_and_fail_on_each_wrong_value() -> None:
    checks.cross_replica_hit(_observed(B=_reading("B", 768)), "B")
    checks.no_hit(_observed(C=_reading("C", 0)), "C")
    # chunk size rendered twice too big: one 512-token chunk; a seed or URL that differs: nothing at all
    for wrong in (512, 0):
        with pytest.raises(AssertionError, match="expected LMCache hit tokens"):
            checks.cross_replica_hit(_observed(B=_reading("B", wrong)), "B")
    with pytest.raises(AssertionError, match="expected a miss"):
        checks.no_hit(_observed(C=_reading("C", 768)), "C")
    # the counters must agree: a log line alone is not a hit
    lying = dataclasses.replace(_reading("B", 768), external_hits_delta=0.0)
    with pytest.raises(AssertionError, match="external prefix hits"):
        checks.cross_replica_hit(_observed(B=lying), "B")


def test_writer_check_needs_files_under_the_shared_mount() -> None:
    files = [f"ep/model@1@0@{i}@bfloat16.data" for i in range(3)]
    checks.writer_stored(_observed(A=_reading("A", 0, files=files)))
    with pytest.raises(AssertionError, match="not below the L2 mount"):
        checks.writer_stored(_observed(A=_reading("A", 0, files=files, l2_dir=None)))
    with pytest.raises(AssertionError, match="expected 3 chunk files"):
        checks.writer_stored(_observed(A=_reading("A", 0, files=files[:1])))


def _probe(exit_code: int, outcome: str, *, wrote: int, read: int, hits: int, message: str = "") -> dict[str, object]:
    result = {"outcome": outcome, "a_write_bytes": wrote, "l2_read_bytes": read, "hit_tokens": hits, "message": message}
    return {"exit_code": exit_code, "results": [result]}


def test_probe_checks_pass_on_a_good_run_and_fail_on_wrong_results() -> None:
    seed_miss = "pod B asked LMCache but read nothing ... the pods hash differently (PYTHONHASHSEED, model name)"
    good = _observed()
    good.probe = {
        "replicas": _probe(0, "hit", wrote=9000, read=9000, hits=1792),
        "other_seed": _probe(1, "miss", wrote=9000, read=0, hits=0, message=seed_miss),
    }
    checks.probe_hit(good)
    checks.probe_miss_explained(good)
    wrong_hits = {
        "a partial chunk": _probe(0, "hit", wrote=9000, read=9000, hits=1800),
        "fewer tokens than the prompt's full chunks": _probe(0, "hit", wrote=9000, read=9000, hits=1536),
        "a miss": _probe(1, "miss", wrote=9000, read=0, hits=0),
    }
    for report in wrong_hits.values():
        with pytest.raises(AssertionError):
            checks.probe_hit(dataclasses.replace(good, probe={**good.probe, "replicas": report}))
    with pytest.raises(AssertionError, match="does not name the hash seed"):
        checks.probe_miss_explained(
            dataclasses.replace(good, probe={**good.probe, "other_seed": _probe(1, "miss", wrote=1, read=0, hits=0)})
        )
    with pytest.raises(AssertionError, match="did not run"):
        checks.probe_hit(_observed())


def test_metric_sum_adds_label_sets() -> None:
    text = 'vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 768.0\n' + (
        'vllm:external_prefix_cache_hits_total{engine="1"} 2.0\nvllm:external_prefix_cache_queries_total 9.0\n'
    )
    assert metric_sum(text, "vllm:external_prefix_cache_hits_total") == 770.0


def test_an_engine_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    path = server_folder(tmp_path / "fake", "import sys\nprint('boom: no model here')\nsys.exit(3)\n")
    launch = render.Launch("fake", ("--port", str(_free())), {"PYTHONPATH": str(path)}, {}, None)
    with Engines(sys.executable, tmp_path, "m", 60) as group, pytest.raises(EngineError, match="exited with code 3"):
        group.start([("x", launch)])
    assert "boom: no model here" in (tmp_path / "x.log").read_text()


def test_an_engine_that_never_serves_times_out_and_is_stopped(tmp_path: Path) -> None:
    path = server_folder(
        tmp_path / "fake",
        "import os, subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\ntime.sleep(600)\n",
    )
    launch = render.Launch("fake", ("--port", str(_free())), {"PYTHONPATH": str(path)}, {}, None)
    started = time.monotonic()
    with Engines(sys.executable, tmp_path, "m", 3) as group:
        with pytest.raises(EngineError, match="not serving after 3 s"):
            group.start([("x", launch)])
        engine = group.engines[0]
    assert time.monotonic() - started < 60
    assert engine.proc is not None and engine.proc.returncode is not None
    assert not group_alive(engine.proc.pid)  # the whole group, the child it spawned too


def test_a_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        launch = render.Launch("fake", ("--port", str(port)), {}, {}, None)
        with Engines(sys.executable, tmp_path, "m", 3) as group, pytest.raises(EngineError, match="in use"):
            group.start([("x", launch)])


def _free() -> int:
    from kvtier.bench.testserver import free_port

    return free_port()


def test_venv_finds_torch_in_pips_find_links(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    listing = f"global.find-links='{tmp_path}/none {wheels}'\n:env:.timeout='180'\n"
    folders = pip_find_links(listing, {"PIP_FIND_LINKS": str(wheels)})
    assert folders == [f"{tmp_path}/none", str(wheels)]
    assert local_wheel_dir(folders, "torch==2.13.0+cpu") == str(wheels)
    assert local_wheel_dir(folders, "torch==2.14.0+cpu") is None
    assert torch_pin("# x\nnumpy==2.3.5\ntorch==2.13.0+cpu\n") == "torch==2.13.0+cpu"
    with pytest.raises(VenvError, match="pins no torch"):
        torch_pin("numpy==2.3.5\n")
    assert venv_key("a") != venv_key("b")


def test_venv_fails_fast_on_an_unreachable_torch_index() -> None:
    started = time.monotonic()
    with pytest.raises(VenvError, match="unreachable"):
        probe(f"http://127.0.0.1:{_free()}/whl/cpu", timeout_s=5)
    assert time.monotonic() - started < 30


def test_torch_source_prefers_a_find_links_wheel_and_else_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # only the environment's find-links count
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    assert torch_source("torch==2.13.0+cpu", "http://127.0.0.1:9/none") == ["--no-index", "--find-links", str(wheels)]
    monkeypatch.delenv("PIP_FIND_LINKS")
    started = time.monotonic()
    with pytest.raises(VenvError, match="unreachable"):
        torch_source("torch==2.13.0+cpu", f"http://127.0.0.1:{_free()}/whl/cpu")
    assert time.monotonic() - started < 60
