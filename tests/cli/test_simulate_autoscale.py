"""`kvtier simulate --autoscale` end to end with the planner's own tier model: the shipped sample trace gives the
with/without-L2 table and the figure; the policy comes from flags, then the endpoint's autoscaling section; bad
input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.cli import main
from kvtier.simulate.elastic import STARTUP_S, TARGET_INFLIGHT
from tests.support import CONFIG_DIR, SAMPLE_TRACE

ENDPOINT = ["--lob", "retail", "--endpoint", "qwen3-8b"]


def simulate(*args: str, config_dir: Path = CONFIG_DIR) -> int:
    return main(["simulate", "-e", "dev", "--config-dir", str(config_dir), *ENDPOINT, *args])


def test_sample_trace_prints_the_table_and_writes_the_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate("--trace", str(SAMPLE_TRACE), "--autoscale", "--min-replicas", "1", "2", "--out", str(tmp_path))
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    rows = [line.split("│")[1:3] for line in lines if line.startswith("│")]
    assert [(m.strip(), l2.strip()) for m, l2 in rows] == [("1", "on"), ("1", "off"), ("2", "on"), ("2", "off")]
    for needle in ("GPU-h", "p90", "min 1: with the shared L2", "min 2: with the shared L2", "start-up 100 s"):
        assert needle in out
    (run,) = tmp_path.iterdir()
    figure = run / "elastic.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {figure}" in out.replace("\n", "")


def test_json_policy_defaults_and_l2_off_means_no_l2(capsys: pytest.CaptureFixture[str]) -> None:
    # The dev endpoint has no autoscaling section: the section's own defaults (min 1, max 5, 30 s, 300 s).
    code = simulate("--trace", str(SAMPLE_TRACE), "--autoscale", "--no-plots", "--json")
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["routing"] == "prefixaware"
    on, off = data["results"]
    assert (on["l2"], off["l2"]) == (True, False)
    assert on["policy"] == {
        "min_replicas": 1,
        "max_replicas": 5,
        "target_inflight": TARGET_INFLIGHT,
        "polling_s": 30.0,
        "cooldown_s": 300.0,
        "startup_s": STARTUP_S,
    }
    assert off["hit_rates"]["l2_same"] == off["hit_rates"]["l2_other"] == 0.0
    assert on["served"] == off["served"] == 2406  # 1,587 of 3,993 are longer than max_model_len
    assert on["timeline"][0] == {"t_s": 0.0, "ready": 1, "holding": 1}


def test_the_endpoint_autoscaling_section_sets_the_defaults(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.write_text(
        lob.read_text().replace(
            "autoscaling: null",
            "autoscaling: {min_replicas: 2, max_replicas: 2, polling_interval_s: 20, cooldown_period_s: 120, "
            "trigger: {type: cloudwatch, namespace: AWS/SageMaker, metric_name: Queue, target_value: 2}}",
        )
    )
    code = simulate(
        "--trace", str(SAMPLE_TRACE), "--autoscale", "--startup-s", "60", "--no-plots", "--json", config_dir=config_copy
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    policy = json.loads(captured.out)["results"][0]["policy"]
    assert [policy[k] for k in ("min_replicas", "max_replicas", "polling_s", "cooldown_s")] == [2, 2, 20, 120]
    assert policy["startup_s"] == 60.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--autoscale", "--min-replicas", "4", "--max-replicas", "2"], "--max-replicas 2 is below --min-replicas 4"),
        (["--autoscale", "--startup-s", "-5"], "--startup-s -5.0 is negative"),
        (
            ["--autoscale", "--polling-s", "1200"],
            "the trace spans 1022.02 s, shorter than one polling interval (1200 s)",
        ),
        (["--autoscale", "--limit", "1"], "the trace spans 0 s, shorter than one polling interval (30 s)"),
        (["--min-replicas", "2"], "--min-replicas is an autoscaling setting; add --autoscale"),
        (["--autoscale", "--replicas", "2"], "--replicas and --autoscale exclude each other"),
        (["--autoscale", "--routing", "session", "kvaware"], "--autoscale replays one routing strategy"),
        (["--autoscale", "--l2-gb", "1", "2"], "--autoscale sweeps min replicas, not sizes"),
        (["--autoscale", "--l2-gb", "0"], "endpoint 'qwen3-8b' has no shared L2 to compare"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate("--trace", str(SAMPLE_TRACE), "--no-plots", *args)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("kvtier simulate: ")
    assert message in err
    assert "Traceback" not in err


def test_a_standalone_endpoint_replays_its_routers_cache_aware_under_autoscaling(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The elastic replay takes the same settings as the fixed one: a standalone endpoint's prefixaware is vllm-router's
    cache_aware with the knobs it is rendered with (kvtier/planner/pool_routing.py), not the operator's prefix tree."""
    from kvtier.planner.pool_routing import ROUTER_DEFAULT_KNOBS
    from kvtier.simulate import elastic

    seen: list[object] = []
    real = elastic.simulate_elastic

    def spy(units, model, sim, plan, tp):  # type: ignore[no-untyped-def]
        seen.append(sim.cache_aware)
        return real(units, model, sim, plan, tp)

    monkeypatch.setattr(elastic, "simulate_elastic", spy)
    args = ["simulate", "-e", "prod", "--lob", "support", "--endpoint", "llama31-8b", "--trace", str(SAMPLE_TRACE)]
    assert main([*args, "--autoscale", "--no-plots", "--json", "--routing", "prefixaware"]) == 0, capsys.readouterr()
    assert seen and all(knobs == ROUTER_DEFAULT_KNOBS for knobs in seen)
