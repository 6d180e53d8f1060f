"""`kvtier simulate` end to end on the example config, with a hand-set tier model standing in for the planner's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import kvtier.cli.simulate as cli
from kvtier.cli import main
from kvtier.config.loader import Config
from kvtier.planner.model import TierModel
from kvtier.simulate import STRATEGIES, SimConfig
from kvtier.simulate.engine import JANITOR_EVERY_S
from kvtier.sizing import JANITOR_TARGET_FRACTION
from tests.support import CONFIG_DIR, SAMPLE_TRACE

KV = 147_456  # bytes per token of Qwen3-8B in bf16 (36 layers x 8 KV heads x 128 x 2 x 2)


class FakePlanner:
    """Records its calls; sizes tiers from the config like a planner would (hand-set speeds)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self,
        config: Config,
        lob: str,
        endpoint: str,
        *,
        replicas: int | None = None,
        l1_gib: float | None = None,
        l2_gb: float | None = None,
    ) -> TierModel:
        self.calls.append(
            {"env": config.env.name, "lob": lob, "endpoint": endpoint, "replicas": replicas, "l1": l1_gib, "l2": l2_gb}
        )
        found = config.lob(lob)
        spec = next(e for e in found.endpoints if e.name == endpoint)
        return TierModel(
            kv_bytes_per_token=KV,
            chunk_tokens=spec.cache.chunk_size,
            block_tokens=spec.block_size,
            replicas=replicas or spec.replicas,
            l0_tokens=160_000,
            l1_tokens=int((spec.cache.l1_gb if l1_gib is None else l1_gib) * 2**30 / KV),
            l2_tokens=int((found.l2.budget_gb if l2_gb is None else l2_gb) * 1e9 / KV),
            l1_load_s_per_token=7e-6,
            l2_load_s_per_token=6e-5,
            prefill_s_per_token=9e-5,
            prefill_s_per_token_squared=1.6e-9,
            max_model_len=spec.max_model_len,
        )


@pytest.fixture()
def planner(monkeypatch: pytest.MonkeyPatch) -> FakePlanner:
    fake = FakePlanner()
    monkeypatch.setattr(cli, "load_tier_model", lambda: fake)
    return fake


@pytest.fixture()
def small_trace(tmp_path: Path) -> Path:
    rows = []
    for i in range(40):
        tokens = 1500 + 512 * (i % 3)
        blocks = [i % 4, *range(1000 + 10 * i, 1000 + 10 * i + -(-tokens // 512) - 1)]  # 4 shared first blocks
        rows.append({"timestamp": 100 * i, "input_length": tokens, "output_length": 5, "hash_ids": blocks})
    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def simulate(*args: str) -> int:
    return main(["simulate", "--config-dir", str(CONFIG_DIR), *args])


def test_example_config_and_shipped_sample_trace_give_all_four_strategies_and_plots(
    planner: FakePlanner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate("--lob", "retail", "--endpoint", "qwen3-8b", "--trace", str(SAMPLE_TRACE), "--out", str(tmp_path))
    out = capsys.readouterr().out
    assert code == 0
    for strategy in STRATEGIES:
        assert strategy in out
    assert "prefixaware*" in out  # the configured strategy is marked
    for name in ("L0", "L1", "L2 own", "L2 peer", "TTFT", "p50"):
        assert name in out
    (run,) = tmp_path.iterdir()  # this run's own folder
    assert sorted(p.name for p in run.iterdir()) == ["hit-rate-per-tier.png", "ttft.png"]
    assert planner.calls == [
        {"env": "dev", "lob": "retail", "endpoint": "qwen3-8b", "replicas": None, "l1": None, "l2": None}
    ]


def test_json_overrides_and_l2_sweep(
    planner: FakePlanner, small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate(
        "--trace", str(small_trace), "--routing", "session", "kvaware", "--replicas", "3", "--l1-gib", "5",
        "--l2-gb", "0", "1", "--qps-scale", "2", "--seed", "4", "--out", str(tmp_path), "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["lob"], data["endpoint"], data["configured_routing"]) == ("retail", "qwen3-8b", "prefixaware")
    assert data["l2_max_age_hours"] == 24.0
    runs = [(r["routing"], r["extra"]["l2_gb"]) for r in data["results"]]
    assert runs == [("session", 0.0), ("session", 1.0), ("kvaware", 0.0), ("kvaware", 1.0)]
    for result in data["results"]:
        assert (result["replicas"], result["seed"], result["qps_scale"]) == (3, 4, 2.0)
        assert result["served"] == 40
        assert set(result["hit_rates"]) == {"l0", "l1", "l2_same", "l2_other", "total"}
    assert [c["l2"] for c in planner.calls] == [0.0, 1.0]
    assert {(c["replicas"], c["l1"]) for c in planner.calls} == {(3, 5.0)}
    assert sorted(Path(p).name for p in data["plots"]) == ["hit-rate-per-tier.png", "hit-rate-vs-l2.png", "ttft.png"]


def test_every_request_too_long_is_a_problem(
    planner: FakePlanner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "long.jsonl"
    row = {"timestamp": 0, "input_length": 20_000, "output_length": 1, "hash_ids": list(range(40))}
    trace.write_text(json.dumps(row) + "\n")
    assert simulate("--trace", str(trace), "--no-plots", "--routing", "roundrobin") == 1
    assert "max_model_len" in capsys.readouterr().err
    assert planner.calls


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--endpoint", "nope"], "--endpoint 'nope' is not in LOB 'retail'; use one of qwen3-8b"),
        (["--lob", "nope"], "--lob 'nope' is not a line of business of 'dev'; use one of retail"),
        (["--replicas", "0"], "--replicas 0 is out of range"),
        (["--l2-gb", "10", "-1"], "--l2-gb"),
        (["--qps-scale", "0"], "--qps-scale"),
        (["--qps-scale", "nan"], "--qps-scale nan is out of range; give a finite factor > 0"),
        (["--qps-scale", "inf"], "--qps-scale inf is out of range"),
        (["--l1-gib", "inf"], "--l1-gib inf is out of range; give finite sizes"),
        (["--l1-gib", "4", "nan"], "--l1-gib 4.0 nan is out of range"),
        (["--l1-gb", "20", "--l1-gib", "20"], "give --l1-gib only"),
        (["--l1-gib", "1", "2", "--l2-gb", "1", "2"], "sweep one of them at a time"),
        (["--l2-gb", "10", "nan"], "--l2-gb 10.0 nan is out of range; give finite sizes"),
        (["--l2-gb", "inf"], "--l2-gb inf is out of range"),
        (["--janitor-every", "nan"], "--janitor-every nan is out of range; give finite seconds >= 0"),
        (["--janitor-every=-inf"], "--janitor-every -inf is out of range"),
        (["--replicas", "1025"], "--replicas 1025 is out of range; give 1 to 1024"),
        (["--replicas", "1000000000"], "--replicas 1000000000 is out of range"),
        (["--limit", "0"], "--limit 0 is out of range"),
    ],
)
@pytest.mark.usefixtures("planner")
def test_bad_input_exits_2_with_a_message(
    small_trace: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert simulate("--trace", str(small_trace), "--no-plots", *args) == 2
    assert message in capsys.readouterr().err


def test_an_unwritable_out_folder_exits_2_before_the_replay(
    planner: FakePlanner, small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert simulate("--trace", str(small_trace), "--out", str(blocker / "plots")) == 2
    assert f"cannot write to the output folder {blocker / 'plots'}" in capsys.readouterr().err
    assert planner.calls == []  # nothing simulated
    assert simulate("--trace", str(small_trace), "--out", str(blocker / "plots"), "--no-plots", "--json") == 0


def test_limit_replays_the_first_requests(
    planner: FakePlanner, small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert simulate("--trace", str(small_trace), "--limit", "7", "--routing", "session", "--no-plots", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["results"][0]["requests"] == 7
    assert data["trace"]["requests"] == 7


@pytest.mark.usefixtures("planner")
def test_a_bad_trace_line_names_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n{"timestamp": 1}\n'
    )
    assert simulate("--trace", str(trace), "--no-plots") == 2
    assert f"{trace}:2: a line must be a JSON object with the keys" in capsys.readouterr().err
    assert simulate("--trace", str(tmp_path / "absent.jsonl"), "--no-plots") == 2


def test_the_planners_tier_model_drives_the_run(small_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvtier.planner.tiers import tier_model
    from kvtier.rules import load_checked

    args = ("--lob", "retail", "--endpoint", "qwen3-8b", "--trace", str(small_trace), "--json", "--no-plots")
    assert simulate(*args, "--routing", "prefixaware", "--l1-gib", "30") == 0
    data = json.loads(capsys.readouterr().out)
    planned = tier_model(load_checked(CONFIG_DIR, "dev"), "retail", "qwen3-8b", l1_gib=30)
    assert data["tier_model"] == dataclasses.asdict(planned)
    assert data["results"][0]["l1_tokens"] == planned.l1_tokens
    assert data["results"][0]["served"] == 40


def test_a_size_beyond_any_deployment_is_refused_by_the_planner(
    small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert simulate("--trace", str(small_trace), "--no-plots", "--l1-gib", "1e300") == 2
    assert "l1_gib override 1e+300 is out of range; use a number from 0 to 1e+09" in capsys.readouterr().err


def test_the_simulated_janitor_is_the_deployed_one() -> None:
    from kvtier.k8s.curvine.janitor import janitor_args
    from kvtier.rules import load_checked

    args = janitor_args(load_checked(CONFIG_DIR, "dev").env, "retail", 200, 24, ["qwen3-8b"])
    values = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    assert float(values["--interval-seconds"]) == JANITOR_EVERY_S
    assert float(values["--target-fraction"]) == JANITOR_TARGET_FRACTION == SimConfig().l2_target_fraction
    assert SimConfig().janitor_every_s == JANITOR_EVERY_S
