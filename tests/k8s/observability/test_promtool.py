"""The rules under promtool: `check rules` on every rule file of every example environment, and `test rules` with
synthetic series for every alert (one world where it fires, one where it stays quiet) and for the tier arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.catalog import resolve_model
from kvtier.k8s.observability.charts import lob_files, platform_files
from kvtier.rules import load_checked
from tests.k8s.observability import promtool
from tests.support import CONFIG_DIR

DEV = load_checked(CONFIG_DIR, "dev")
LOB = DEV.lobs[0]
ENDPOINT = LOB.endpoints[0]
KV = resolve_model(ENDPOINT.model.id, LOB.models).kv_bytes_per_token
EP = f'lob="{LOB.name}", kvtier_endpoint="{ENDPOINT.name}"'
EP_LABELS = {"lob": LOB.name, "kvtier_endpoint": ENDPOINT.name}
GPU_NODES = sum(g.count for g in DEV.env.groups("gpu"))  # one Curvine worker each


def _write_rules(tmp_path: Path, env_name: str = "dev") -> list[Path]:
    config = load_checked(CONFIG_DIR, env_name)
    files = dict(platform_files(config.env))
    for lob in config.lobs:
        files.update(lob_files(config.env, lob))
    paths = []
    for name, text in files.items():
        if name.endswith(".rules.yaml"):
            path = tmp_path / env_name / Path(name).name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            paths.append(path)
    return sorted(paths)


def _alert_rules(paths: list[Path]) -> dict[str, dict[str, Any]]:
    rules = [r for p in paths for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"]]
    return {r["alert"]: r for r in rules if "alert" in r}


@pytest.mark.parametrize("env_name", ["dev", "prod", "byoc"])
def test_every_rule_file_passes_promtool_check(env_name: str, tmp_path: Path) -> None:
    paths = _write_rules(tmp_path, env_name)
    result = promtool.run("check", "rules", *paths)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(paths)


def test_a_broken_expression_fails_promtool_check(tmp_path: Path) -> None:
    path = tmp_path / "bad.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "a:b", "expr": "sum(("}]}]}))
    assert promtool.run("check", "rules", path).returncode != 0


# alert -> (series where it fires, labels of the alert besides its own, series where it does not, eval time)
ALERT_CASES: dict[str, tuple[list[tuple[str, str]], dict[str, str], list[tuple[str, str]], str]] = {
    "KvtierFusePodRestarted": (
        [
            (
                'kube_pod_container_status_restarts_total{namespace="curvine", container="curvine-fuse", pod="fuse-x"}',
                "0 0 0 1 1 1 1 1 1 1",
            )
        ],
        {"namespace": "curvine", "container": "curvine-fuse", "pod": "fuse-x"},
        [
            (
                'kube_pod_container_status_restarts_total{namespace="curvine", container="curvine-fuse", pod="fuse-x"}',
                "1x10",
            )
        ],
        "6m",
    ),
    "KvtierGpuNodeWithoutCurvineWorker": (
        [
            (
                'kube_daemonset_status_number_ready{namespace="curvine", daemonset="curvine-worker"}',
                f"{GPU_NODES - 1}x30",
            ),
            (
                'kube_daemonset_status_desired_number_scheduled{namespace="curvine", daemonset="curvine-worker"}',
                f"{GPU_NODES}x30",
            ),
            ('worker_num{kvtier_component="master", tag="live"}', f"{GPU_NODES}x30"),
        ],
        {"namespace": "curvine", "daemonset": "curvine-worker"},
        [
            ('kube_daemonset_status_number_ready{namespace="curvine", daemonset="curvine-worker"}', f"{GPU_NODES}x30"),
            (
                'kube_daemonset_status_desired_number_scheduled{namespace="curvine", daemonset="curvine-worker"}',
                f"{GPU_NODES}x30",
            ),
            ('worker_num{kvtier_component="master", tag="live"}', f"{GPU_NODES}x30"),
        ],
        "15m",
    ),
    "KvtierCurvineMasterNotReady": (
        [('kube_statefulset_status_replicas_ready{namespace="curvine", statefulset="curvine-master"}', "0x20")],
        {"namespace": "curvine", "statefulset": "curvine-master"},
        [('kube_statefulset_status_replicas_ready{namespace="curvine", statefulset="curvine-master"}', "1x20")],
        "10m",
    ),
    "KvtierL2OverBudget": (
        [
            (f'kvtier_l2_used_bytes{{lob="{LOB.name}"}}', "250e9x60"),
            (f'kvtier_l2_budget_bytes{{lob="{LOB.name}"}}', "200e9x60"),
        ],
        {"lob": LOB.name},
        [
            (f'kvtier_l2_used_bytes{{lob="{LOB.name}"}}', "150e9x60"),
            (f'kvtier_l2_budget_bytes{{lob="{LOB.name}"}}', "200e9x60"),
        ],
        "40m",
    ),
    "KvtierJanitorStale": (
        [(f'kvtier_janitor_last_success_timestamp_seconds{{lob="{LOB.name}"}}', "0x150")],
        {"lob": LOB.name},
        [(f'kvtier_janitor_last_success_timestamp_seconds{{lob="{LOB.name}"}}', "0+60x150")],  # a pass every minute
        "2h",
    ),
    "KvtierPoolNearlyFull": (
        [('fs_used{kvtier_component="master"}', "90x30"), ('capacity{kvtier_component="master"}', "100x30")],
        {},
        [('fs_used{kvtier_component="master"}', "80x30"), ('capacity{kvtier_component="master"}', "100x30")],
        "20m",
    ),
    "KvtierKyvernoPolicyNotReady": (
        [
            (
                'kyverno_policy_rule_info_total{policy_name="kvtier-l2-curvine", rule_name="r", status_ready="false"}',
                "1x20",
            )
        ],
        {"policy_name": "kvtier-l2-curvine"},
        [
            (
                'kyverno_policy_rule_info_total{policy_name="kvtier-l2-curvine", rule_name="r", status_ready="true"}',
                "1x20",
            )
        ],
        "15m",
    ),
    "KvtierTtftSloBreached": (  # SLO 2 s: every request between 2.5 s and 5 s, or all under 1 s
        [
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="1.0"}}', "0x30"),
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="2.5"}}', "0x30"),
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="5.0"}}', "0+10x30"),
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="+Inf"}}', "0+10x30"),
        ],
        EP_LABELS,
        [
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="1.0"}}', "0+10x30"),
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="2.5"}}', "0+10x30"),
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="5.0"}}', "0+10x30"),
            (f'vllm:time_to_first_token_seconds_bucket{{{EP}, le="+Inf"}}', "0+10x30"),
        ],
        "20m",
    ),
    "KvtierL2SilentMiss": (  # long prompts flow; LMCache reads nothing from L2
        [
            (f"vllm:request_prompt_tokens_count{{{EP}}}", "0+10x60"),
            (f'vllm:request_prompt_tokens_bucket{{{EP}, le="1000.0"}}', "0x60"),
            (f"lmcache:num_remote_read_bytes_total{{{EP}}}", "0x60"),
        ],
        EP_LABELS,
        [
            (f"vllm:request_prompt_tokens_count{{{EP}}}", "0+10x60"),
            (f'vllm:request_prompt_tokens_bucket{{{EP}, le="1000.0"}}', "0x60"),
            (f"lmcache:num_remote_read_bytes_total{{{EP}}}", f"0+{KV * 512}x60"),
        ],
        "45m",
    ),
    "KvtierEndpointPodWithoutL2": (
        [(f'vllm:num_requests_running{{{EP}, namespace="kvtier-{LOB.name}", pod="p1"}}', "0x20")],
        {**EP_LABELS, "namespace": f"kvtier-{LOB.name}", "pod": "p1"},
        [
            (f'vllm:num_requests_running{{{EP}, namespace="kvtier-{LOB.name}", pod="p1"}}', "0x20"),
            (
                f'kube_pod_spec_volumes_persistentvolumeclaims_info{{namespace="kvtier-{LOB.name}", pod="p1", '
                'persistentvolumeclaim="l2-cache", volume="l2"}',
                "1x20",
            ),
        ],
        "15m",
    ),
}

# Worlds that must stay quiet for another reason than the one above.
EXTRA_QUIET: dict[str, tuple[list[tuple[str, str]], str]] = {
    "KvtierL2SilentMiss": (  # no L2 reads, but no long prompts either: not a silent miss
        [
            (f"vllm:request_prompt_tokens_count{{{EP}}}", "0+10x60"),
            (f'vllm:request_prompt_tokens_bucket{{{EP}, le="1000.0"}}', "0+10x60"),
        ],
        "45m",
    ),
}


def _series(items: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"series": s, "values": v} for s, v in items]


def _alert_test(
    name: str, rule: dict[str, Any], series: list[tuple[str, str]], at: str, labels: dict[str, str] | None
) -> dict[str, Any]:
    expected = (
        [] if labels is None else [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": rule["annotations"]}]
    )
    return {
        "interval": "1m",
        "input_series": _series(series),
        "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": expected}],
    }


def test_every_alert_fires_and_stays_quiet_under_promtool(tmp_path: Path) -> None:
    paths = _write_rules(tmp_path)
    alerts = _alert_rules(paths)
    assert set(alerts) == set(ALERT_CASES), "every alert needs a firing and a quiet case"
    tests = []
    for name, (firing, labels, quiet, at) in ALERT_CASES.items():
        tests.append(_alert_test(name, alerts[name], firing, at, labels))
        tests.append(_alert_test(name, alerts[name], quiet, at, None))
    for name, (quiet, at) in EXTRA_QUIET.items():
        tests.append(_alert_test(name, alerts[name], quiet, at, None))
    spec = tmp_path / "alerts.test.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(p) for p in paths], "evaluation_interval": "1m", "tests": tests})
    )
    result = promtool.run("test", "rules", spec)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails_promtool_test(tmp_path: Path) -> None:
    """The harness itself can fail: a quiet world claimed to fire is reported."""
    paths = _write_rules(tmp_path)
    alerts = _alert_rules(paths)
    _, labels, quiet, at = ALERT_CASES["KvtierPoolNearlyFull"]
    spec = tmp_path / "wrong.test.yaml"
    test = _alert_test("KvtierPoolNearlyFull", alerts["KvtierPoolNearlyFull"], quiet, at, labels)
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(p) for p in paths], "evaluation_interval": "1m", "tests": [test]})
    )
    assert promtool.run("test", "rules", spec).returncode != 0


def test_tier_arithmetic_under_promtool(tmp_path: Path) -> None:
    """Per minute: 1000 prompt tokens, 100 from the GPU cache, 300 from LMCache of which 200 were read from L2."""
    paths = _write_rules(tmp_path)
    series = [
        (f'vllm:prompt_tokens_by_source_total{{{EP}, source="local_cache_hit"}}', "0+100x30"),
        (f'vllm:prompt_tokens_by_source_total{{{EP}, source="external_kv_transfer"}}', "0+300x30"),
        (f'vllm:prompt_tokens_by_source_total{{{EP}, source="local_compute"}}', "0+600x30"),
        (f"lmcache:num_remote_read_bytes_total{{{EP}}}", f"0+{200 * KV}x30"),
    ]
    expected = {
        "lob_endpoint:kvtier_l0_hit:ratio5m": 0.1,
        "lob_endpoint:kvtier_l1_hit:ratio5m": 0.1,
        "lob_endpoint:kvtier_l2_hit:ratio5m": 0.2,
        "lob_endpoint:kvtier_cached_prompt_tokens:ratio5m": 0.4,
    }
    # In thousandths, rounded: float division is not exact.
    checks = [
        {
            "expr": f"round({name} * 1000)",
            "eval_time": "20m",
            "exp_samples": [{"labels": f"{{{EP}}}", "value": value * 1000}],
        }
        for name, value in expected.items()
    ]
    checks.append(
        {
            "expr": "round(lob:kvtier_l2_hit:ratio5m * 1000)",
            "eval_time": "20m",
            "exp_samples": [{"labels": f'{{lob="{LOB.name}"}}', "value": 200}],
        }
    )
    spec = tmp_path / "tiers.test.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "rule_files": [str(p) for p in paths],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": _series(series), "promql_expr_test": checks}],
            }
        )
    )
    result = promtool.run("test", "rules", spec)
    assert result.returncode == 0, result.stdout + result.stderr
