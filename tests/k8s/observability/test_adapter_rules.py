"""Per-adapter records (issue 35) under promtool: replicas running and waiting each LoRA adapter of an endpoint, from
vLLM's `vllm:lora_requests_info` as real engines export it (tests/engine/test_identity.py reads the real series)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvtier.config.endpoint import Endpoint
from kvtier.config.lob import LineOfBusiness
from kvtier.k8s.observability import rules
from kvtier.k8s.observability.dashboards import ADAPTER_PANEL, endpoint_panels
from kvtier.rules import load_checked
from tests.k8s.observability import promtool
from tests.support import CONFIG_DIR

PROD = load_checked(CONFIG_DIR, "prod")
ENDPOINT = next(e for lob in PROD.lobs for e in lob.endpoints if e.mode == "standalone")
LOB = next(lob for lob in PROD.lobs if ENDPOINT in lob.endpoints)
ADAPTERS = ("alpha", "beta", "gamma")


def _with_adapters() -> LineOfBusiness:
    data = ENDPOINT.model_dump(mode="json", exclude_unset=True)
    data["adapters"] = [
        {
            "name": n,
            "rank": 8,
            "source": {"source": "s3", "bucket": "acme-adapters", "prefix": n, "weights_version": "v1"},
        }
        for n in ADAPTERS
    ]
    data["lora"] = {"max_loras": 2, "max_lora_rank": 8}
    endpoints = tuple(Endpoint.model_validate(data) if e is ENDPOINT else e for e in LOB.endpoints)
    return LOB.model_copy(update={"endpoints": endpoints})


EP = f'lob="{LOB.name}", kvtier_endpoint="{ENDPOINT.name}"'
ENG = f'{EP}, kvtier_component="engine", max_lora="2"'
INFO = "vllm:lora_requests_info"


def _info(instance: str, running: str, waiting: str, values: str) -> tuple[str, str]:
    labels = f'{ENG}, instance="{instance}", running_lora_adapters="{running}", waiting_lora_adapters="{waiting}"'
    return f"{INFO}{{{labels}}}", values


# One sample a minute; a value is the time (s) the engine last saw that adapter combination. "0+60x40": refreshed
# every scrape; "300x40": last seen at 5 min. At 20 min: alpha runs on a and b, beta on b (c's beta is stale), gamma
# nowhere; alpha waits on a, and on c only long ago.
WORLD = [
    _info("a:8000", "alpha", "alpha", "0+60x40"),
    _info("a:8000", "", "", "300x40"),
    _info("b:8000", "alpha,beta", "", "0+60x40"),
    _info("b:8000", "beta", "", "0+60x40"),  # b saw beta alone too: one replica, counted once
    _info("c:8000", "beta", "alpha", "300x40"),
    _info("c:8000", "", "", "0+60x40"),
]
EXPECTED = {("running", "alpha"): 2, ("running", "beta"): 1, ("waiting", "alpha"): 1}


def _test(tmp_path: Path, expected: dict[tuple[str, str], int]) -> Any:
    groups = rules.lob_groups(PROD.env, _with_adapters())
    path = tmp_path / "lob.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    checks = [
        {
            "expr": rules.adapter_record(state),
            "eval_time": "20m",
            "exp_samples": [
                {"labels": f'{rules.adapter_record(state)}{{{EP}, adapter="{name}"}}', "value": count}
                for (s, name), count in sorted(expected.items())
                if s == state
            ],
        }
        for state in rules.ADAPTER_STATES
    ]
    spec = tmp_path / "adapters.test.yaml"
    tests = [
        {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in WORLD], "promql_expr_test": checks}
    ]
    spec.write_text(yaml.safe_dump({"rule_files": [str(path)], "evaluation_interval": "1m", "tests": tests}))
    return promtool.run("test", "rules", spec)


def test_replicas_running_and_waiting_each_adapter_under_promtool(tmp_path: Path) -> None:
    result = _test(tmp_path, EXPECTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_adapter_records_fail_on_the_wrong_numbers(tmp_path: Path) -> None:
    """The check can fail: counting c's stale beta would be 2."""
    assert _test(tmp_path, EXPECTED | {("running", "beta"): 2}).returncode != 0


def test_an_endpoint_without_adapters_gets_no_adapter_rules() -> None:
    names = [g["name"] for g in rules.lob_groups(PROD.env, LOB)]
    assert f"kvtier-{LOB.name}-adapters" not in names
    with_adapters = rules.lob_groups(PROD.env, _with_adapters())
    [group] = [g for g in with_adapters if g["name"] == f"kvtier-{LOB.name}-adapters"]
    assert {(r["record"], r["labels"]["adapter"]) for r in group["rules"]} == {
        (rules.adapter_record(s), a) for s in rules.ADAPTER_STATES for a in ADAPTERS
    }


def test_the_endpoint_dashboard_shows_both_adapter_records() -> None:
    [panel] = [p for p in endpoint_panels() if p.title == ADAPTER_PANEL]
    assert {q.expr.split("{")[0] for q in panel.queries} == {rules.adapter_record(s) for s in rules.ADAPTER_STATES}
