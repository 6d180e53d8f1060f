"""`kvtier plan`'s autoscaling proposals: each number follows from the one TTFT model and the quota rule, says why,
stands beside what the endpoint configures, and validates when copied into the LOB file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.planner.autoscaling import BUSY, TTFT_SHARE, propose
from kvtier.planner.shapes import endpoint_model
from kvtier.planner.tiers import endpoint_tiers
from kvtier.planner.ttft import cold_ttft, l2_hit_ttft
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

N = 4096  # kvtier plan's default prompt length
IN_CLUSTER = "http://kube-prometheus-stack-prometheus.monitoring:9090"


def _plan(config_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert cli(["plan", "-e", "prod", "--config-dir", str(config_dir), "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def _rows(plan: dict[str, Any], lob: str) -> dict[str, dict[str, Any]]:
    endpoint = next(e for e in plan["endpoints"] if e["lob"] == lob)
    return {row["setting"]: row for row in endpoint["autoscaling"]}


def test_targets_follow_the_ttft_model_and_the_slo() -> None:
    config = load_checked(CONFIG_DIR, "prod")
    lob = config.lob("search")
    endpoint = lob.endpoints[0]
    model = endpoint_model(lob, endpoint, "search")
    tiers = endpoint_tiers(config.env, config.lobs, lob, endpoint, model)
    slo = config.env.observability.ttft_p90_slo_ms / 1000
    got = {p.name: p for p in propose(lob, endpoint, tiers, N, slo)}
    cold = cold_ttft(tiers, N).total_s
    hit = l2_hit_ttft(tiers, N)
    assert tiers.has_l2 and hit.total_s < cold  # search's L2 beats recompute at 4,096 tokens (plan's break-even)
    assert got["queue_per_replica"].value == math.floor((slo - hit.total_s) / hit.total_s)
    assert got["ttft_p90_over_slo"].value == TTFT_SHARE
    assert got["computed_tokens_per_replica"].value == round(BUSY * N / cold)
    assert got["l2_hit_tokens_per_replica"].value == round(BUSY * (N - 1) / (hit.l2_read_s + hit.l2_overhead_s))
    assert got["min_replicas"].value == 1 and "no warm spare" in got["min_replicas"].why
    # search holds its quota alone: quota minus one rolling-update pod (operator mode), in replicas of TP GPUs
    surge = endpoint.tensor_parallel if endpoint.mode == "operator" else 0
    assert got["max_replicas"].value == (lob.gpu_quota - surge) // endpoint.tensor_parallel
    assert all(p.why and "\n" not in p.why for p in got.values())


def test_without_an_l2_no_l2_signal_and_todays_replicas_stay_the_floor(config_copy: Path) -> None:
    path = config_copy / "lobs" / "support.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["endpoints"][0]["cache"]["l2"] = "none"
    path.write_text(yaml.safe_dump(doc))
    config = load_checked(config_copy, "prod")
    lob = config.lob("support")
    endpoint = lob.endpoints[0]
    tiers = endpoint_tiers(config.env, config.lobs, lob, endpoint, endpoint_model(lob, endpoint, "support"))
    got = {p.name: p for p in propose(lob, endpoint, tiers, N, 1.5)}
    assert "l2_hit_tokens_per_replica" not in got
    assert got["min_replicas"].value == endpoint.replicas and "without an L2" in got["min_replicas"].why


def test_the_plan_shows_proposals_beside_the_configured_values_and_they_validate(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Copy the plan's proposal for support (standalone) into its LOB file: it validates, and the plan then shows
    each configured value beside the proposal."""
    rows = _rows(_plan(config_copy, capsys), "support")
    assert rows["queue_per_replica"]["configured"] is None
    env = config_copy / "environments" / "prod.yaml"
    env_doc = yaml.safe_load(env.read_text())
    env_doc["keda"] = {"prometheus_url": IN_CLUSTER}
    env.write_text(yaml.safe_dump(env_doc, sort_keys=False))
    lob = config_copy / "lobs" / "support.yaml"
    doc = yaml.safe_load(lob.read_text())
    signals = [s for s in rows if s not in ("min_replicas", "max_replicas")]
    doc["endpoints"][0]["autoscaling"] = {
        "min_replicas": rows["min_replicas"]["proposed"],
        "max_replicas": rows["max_replicas"]["proposed"],
        "triggers": [{"signal": s, "target": rows[s]["proposed"]} for s in signals],
    }
    doc["endpoints"][0]["replicas"] = rows["min_replicas"]["proposed"]
    lob.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_checked(config_copy, "prod")  # the copied proposal passes every rule, the GPU quota included
    again = _rows(_plan(config_copy, capsys), "support")
    assert all(again[s]["configured"] == again[s]["proposed"] for s in again)
