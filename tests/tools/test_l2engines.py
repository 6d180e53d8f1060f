"""tools/l2engines.py and tools/l2model.py (the L2 read benchmark inside real engines): what the engines report is
read from the right counters, a hit's rate and ratio are the fastest passes', a failed load is a row saying why, and
the engines are kvtier's rendering with the endpoint model's KV shape. The engines themselves run only under the
engine lock (`python -m tools.benchl2 --mode engines`); what runs here is everything around them."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from kvtier.bench.metrics import Sample
from kvtier.catalog import MODELS
from tests.tools import fake_l2_engine
from tools import benchl2, l2engines, l2model

FS = (("tier", "1:fs"),)


def vllm_samples(read: float, seconds: float, failures: float = 0.0, hits: float = 0.0) -> list[Sample]:
    return [
        Sample("vllm:kv_offload_tiering_read_bytes_total", FS, read),
        Sample("vllm:kv_offload_tiering_read_bytes_total", (("tier", "0:cpu"),), 7e9),  # not the fs tier
        Sample("vllm:kv_offload_tiering_read_time_total", FS, seconds),
        Sample("vllm:kv_offload_tiering_promotion_job_failures_total", FS, failures),
        Sample("vllm:external_prefix_cache_hits_total", (), hits),
    ]


def lmcache_samples(count: float, read: float, get_s: float, process_s: float, retrieve_s: float) -> list[Sample]:
    return [
        Sample("lmcache:retrieve_process_tokens_time_count", (), count),
        Sample("lmcache:retrieve_process_tokens_time_sum", (), process_s),
        Sample("lmcache:num_remote_read_bytes_total", (), read),
        Sample("lmcache:remote_backend_batched_get_blocking_time_sum", (), get_s),
        Sample("lmcache:time_to_retrieve_sum", (), retrieve_s),
        Sample("vllm:external_prefix_cache_hits_total", (), 0.0),
    ]


def test_a_vllm_hit_is_the_fs_tiers_promotion_bytes_and_time() -> None:
    before = vllm_samples(1e9, 0.5)
    assert l2engines.hit_reading("vllm", before, before) is None  # nothing reported yet
    after = vllm_samples(1e9 + 268_435_456, 0.6, hits=2048)
    reading = l2engines.hit_reading("vllm", before, after)
    assert reading == pytest.approx({"bytes": 268_435_456, "seconds": 0.1, "failures": 0.0, "external_hits": 2048.0})
    failed = l2engines.hit_reading("vllm", before, vllm_samples(1e9, 0.5, failures=1))
    assert failed is not None and failed["failures"] == 1 and failed["bytes"] == 0


def test_an_lmcache_hit_is_reported_once_its_retrieve_is_published() -> None:
    before = lmcache_samples(3, 1e9, 1.0, 2.0, 3.0)
    assert l2engines.hit_reading("lmcache", before, before) is None  # LMCache publishes every 10 s
    after = lmcache_samples(4, 1e9 + 2e8, 1.1, 2.2, 3.4)
    reading = l2engines.hit_reading("lmcache", before, after)
    assert reading == pytest.approx(
        {"bytes": 2e8, "seconds": 0.1, "process_s": 0.2, "retrieve_s": 0.4, "external_hits": 0.0}
    )


def reading(read: float, seconds: float, **extra: float) -> dict[str, float]:
    return {"bytes": read, "seconds": seconds, "external_hits": 2048, "cached_tokens": 2048} | extra


def test_a_point_is_the_fastest_engine_pass_over_the_fastest_plain_pass() -> None:
    readings = [reading(100, 1.0), reading(100, 0.5), reading(100, 2.0)]  # 100, 200, 50 B/s
    plain = [(100, 0.25), (100, 1.0), (100, 0.5)]  # 400, 100, 200 B/s
    point = l2engines.summarize("vllm", "tmpfs", 32, 4_194_304, readings, plain, {"o_direct": True})
    assert (point.engine, point.plain, point.ratio, point.failed) == (200.0, 400.0, 0.5, "")
    assert point.detail["passes"] == readings and point.detail["o_direct"] is True


def test_lmcache_points_also_carry_the_whole_retrieves_rate() -> None:
    readings = [reading(100, 0.5, process_s=1.0, retrieve_s=2.0), reading(100, 0.25, process_s=0.5, retrieve_s=4.0)]
    point = l2engines.summarize("lmcache", "disk", 256, 33_554_432, readings, [(100, 1.0), (100, 1.0)], {})
    assert point.engine == 400.0 and point.detail["process_rate"] == 200.0 and point.detail["retrieve_rate"] == 50.0


def test_a_point_whose_loads_failed_is_a_row_saying_so_and_what_the_probe_said() -> None:
    failed = reading(0, 0.01, failures=1, external_hits=0, cached_tokens=0)
    detail = {"o_direct": True, "probe": {"outcome": "miss", "message": "every L2 load failed | O_DIRECT"}}
    point = l2engines.summarize("vllm", "fuse-odirect-einval", 32, 4_194_304, [failed], [(100, 1.0)], detail)
    assert point.failed.startswith("every load failed (1 promotion job failures in 1 hits); each hit recomputed")
    assert point.engine == 0 and point.plain == 100.0
    text = l2engines.section([point], 1, "1 / 1 / 1", "2 / 2 / 2")
    row = next(line for line in text.splitlines() if "fuse-odirect-einval" in line)
    assert '`kvtier verify --probe`: miss, "every L2 load failed / O_DIRECT"' in row  # a `|` would split the row
    assert row.endswith("| | yes |") and "none measured" in text
    nothing = l2engines.summarize("vllm", "tmpfs", 32, 1, [reading(0, 0.0)], [(100, 1.0)], {})
    assert nothing.failed.startswith("nothing read from L2")


def test_the_section_has_a_row_a_point_and_says_what_is_not_measured() -> None:
    detail = {"process_rate": 1.5e9, "retrieve_rate": 0.5e9}
    points = [
        l2engines.EnginePoint("lmcache", "tmpfs", 256, 33_554_432, 2e9, 1.8e9, 0.9, detail),
        l2engines.EnginePoint("vllm", "fuse", 32, 4_194_304, 2e9, 1.6e9, 0.8, {"o_direct": False}),
    ]
    text = l2engines.section(points, 3, "1.00 / 1.00 / 1.00", "2.00 / 2.00 / 2.00")
    assert "| LMCache `fs://` | tmpfs | 256 | 33.6 | 2.00 | 1.80 | 0.90 | 1.50 / 0.50 |  |" in text
    assert "| vLLM fs tier | fuse | 32 | 4.2 | 2.00 | 1.60 | 0.80 |  | no (buffered) |" in text
    assert "LMCache `fs://` 0.90-0.90, vLLM fs tier 0.80-0.80" in text
    assert "GPU copy is not measured" in text
    assert text.count("--model:") == 1 and text.count("cpu_bytes_to_use") == 1  # this benchmark's, not the suite's


def test_a_stopped_run_keeps_its_rows_in_the_log(tmp_path: Path) -> None:
    point = l2engines.EnginePoint("vllm", "disk", 32, 4_194_304, 2e9, 1e9, 0.5, {"passes": [reading(1, 1.0)]})
    log = tmp_path / "rows.jsonl"
    log.write_text(json.dumps(asdict(point)) + "\n\n", encoding="utf-8")
    assert l2engines.read_log(log) == [point]


def test_the_engines_are_kvtiers_rendering_with_the_file_size_of_the_row(tmp_path: Path) -> None:
    for connector, tokens in benchl2.ENGINE_SIZES:
        launch, endpoint = l2engines.launch_for(connector, tokens, tmp_path / "l2", tmp_path / "A", tmp_path / "m")
        args = list(launch.args)
        assert args[args.index("--max-model-len") + 1] == str(l2engines.MAX_MODEL_LEN)
        assert args[args.index("--model") + 1] == str(tmp_path / "m")
        if connector == "vllm":
            assert args[args.index("--block-size") + 1] == str(tokens)  # one fs tier file a block
            extra = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
            assert extra["cpu_bytes_to_use"] == l2engines.VLLM_CPU_TIER_BYTES
            assert extra["cpu_bytes_to_use"] > l2engines.HIT_TOKENS * MODELS[endpoint.model.id].kv_bytes_per_token
            assert all(Path(tier["root_dir"]).is_relative_to(tmp_path / "l2") for tier in extra["secondary_tiers"])
        else:
            assert endpoint.cache.chunk_size == tokens and launch.l2_dir is not None
            assert launch.l2_dir.is_relative_to(tmp_path / "l2")


@pytest.mark.parametrize("model_id", ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"])
def test_the_benchmark_model_has_the_endpoint_models_kv_bytes_a_token(model_id: str) -> None:
    model = MODELS[model_id]
    shape = l2model.shape(model.layers, model.kv_heads, model.head_dim)
    kv_bytes = shape["num_hidden_layers"] * 2 * shape["num_key_value_heads"] * shape["head_dim"] * 2  # K and V, bf16
    assert kv_bytes == model.kv_bytes_per_token
    assert shape["num_attention_heads"] == shape["num_key_value_heads"] and shape["hidden_size"] == 256


def test_engine_sizes_are_connector_and_tokens() -> None:
    assert benchl2.engine_size("vllm:32") == ("vllm", 32)
    with pytest.raises(Exception, match="use CONNECTOR:TOKENS"):
        benchl2.engine_size("nvme:32")


class FakeFault:
    """The FUSE fixture's fault switch (tests/k8s/curvine/faultfs.py `set_fault`) for the stand-in engine: while
    `odirect_einval` is on, its L2 loads fail as vLLM's do on a mount that fails O_DIRECT reads."""

    def __init__(self, flag: Path) -> None:
        self.flag = flag
        self.seen: list[str] = []

    def set_fault(self, kind: str) -> None:
        self.seen.append(kind)
        if kind == "odirect_einval":
            self.flag.touch()
        else:
            self.flag.unlink(missing_ok=True)


def test_a_run_measures_each_point_with_an_engine_pair_and_logs_each_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole engine-mode flow on stand-in engines (tests/tools/fake_l2_engine.py as vLLM's server module):
    A stores, B's hits are read from the counters, the plain reader reads the same files, the FUSE mount's extra
    row fails under the fault with the probe's message, and the rows are logged as measured."""
    server = tmp_path / "server" / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("fake_l2_engine.py"), server / "api_server.py")
    fail_flag = tmp_path / "fail"
    rendered = l2engines.launch_for

    def fake_launch(*args: Any) -> tuple[Any, Any]:
        launch, endpoint = rendered(*args)
        env = launch.env | {"PYTHONPATH": str(tmp_path / "server"), fake_l2_engine.FAIL_FILE_ENV: str(fail_flag)}
        return replace(launch, env=env), endpoint

    probes: list[str] = []

    def fake_probe(a: Any, b: Any) -> dict[str, str]:
        probes.append(b.log.name)
        return {"outcome": "miss", "message": "m"}

    monkeypatch.setattr(l2engines, "launch_for", fake_launch)
    monkeypatch.setattr(l2engines, "build_model", lambda python, model: tmp_path / "model")
    monkeypatch.setattr(l2engines, "run_probe", fake_probe)
    disk, fuse = tmp_path / "disk", tmp_path / "fuse"
    disk.mkdir()
    fuse.mkdir()
    fault = FakeFault(fail_flag)
    found = [benchl2.Mount("disk", disk, True), benchl2.Mount("fuse", fuse, True, fault)]
    log = tmp_path / "rows.jsonl"
    points = l2engines.measure(
        Path(sys.executable), found, tmp_path / "scratch", [("vllm", 32)], passes=2, lock=tmp_path / "lock", log=log
    )
    assert [(p.mount, bool(p.failed)) for p in points] == [
        ("disk", False),
        ("fuse", False),
        ("fuse-odirect-einval", True),
    ]
    measured = points[0]
    assert (
        measured.engine > 0 and measured.plain > 0 and measured.ratio == pytest.approx(measured.engine / measured.plain)
    )
    assert [r["bytes"] for r in measured.detail["passes"]] == [64 * fake_l2_engine.FILE_BYTES] * 2
    assert measured.detail["o_direct"] is True  # the stand-in logs no fallback warning
    assert points[2].failed.startswith("every load failed (1 promotion job failures in 1 hits)")
    assert points[2].detail["probe"] == {"outcome": "miss", "message": "m"} and probes == ["B.log"]
    assert fault.seen == ["odirect_einval", "none"]  # the fault is off again after its hit
    assert l2engines.read_log(log) == points
    assert not any(disk.iterdir()) and not any(fuse.iterdir())  # each point's L2 files are removed


def test_a_point_whose_engines_do_not_start_is_a_row_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = l2engines.launch_for

    def no_server(*args: Any) -> tuple[Any, Any]:  # no `vllm` module to run: the engine exits at once
        launch, endpoint = rendered(*args)
        return replace(launch, env=launch.env | {"PYTHONPATH": str(tmp_path / "nothing")}), endpoint

    monkeypatch.setattr(l2engines, "launch_for", no_server)
    monkeypatch.setattr(l2engines, "build_model", lambda python, model: tmp_path / "model")
    mounts = [benchl2.Mount(name, tmp_path / name, False) for name in ("tmpfs", "disk")]
    for found in mounts:
        found.root.mkdir()
    points = l2engines.measure(Path(sys.executable), mounts, tmp_path / "scratch", [("lmcache", 256)], lock=None)
    assert [p.mount for p in points] == ["tmpfs", "disk"]
    assert all(p.failed.startswith("EngineError: ") and "exited with code 1" in p.failed for p in points)
