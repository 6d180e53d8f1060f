"""Autoscaling that cannot work gets one line from `kvtier validate` naming the file, the field and the fix; settings
that can work load in both modes (docs/endpoints.md "Autoscaling")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main as cli
from kvtier.config.endpoint import SignalTrigger
from kvtier.rules import load_checked

Doc = dict[str, Any]
AMP_ARN = "arn:aws:aps:us-west-2:111122223333:workspace/ws-01234567-89ab-cdef-0123-456789abcdef"
IN_CLUSTER = "http://kube-prometheus-stack-prometheus.monitoring:9090"
QUEUE = {"signal": "queue_per_replica", "target": 4}


def _edit(config_dir: Path, relative: str, change: Callable[[Doc], None]) -> None:
    path = config_dir / relative
    doc: Doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")


def _support(autoscaling: Doc, **endpoint: Any) -> Callable[[Doc], None]:
    """The prod `support` endpoint (standalone, curvine L2) with `autoscaling`."""

    def change(doc: Doc) -> None:
        doc["endpoints"][0].update(autoscaling=autoscaling, **endpoint)

    return change


def _env(**fields: Any) -> Callable[[Doc], None]:
    return lambda doc: doc.update(fields)


def _amp(doc: Doc, region: str = "us-west-2") -> None:
    arn = AMP_ARN.replace("us-west-2", region)
    doc["observability"] = {"mode": "hyperpod-addon", "hyperpod_addon": {"amp_workspace_arn": arn}}


def _one_line(capsys: pytest.CaptureFixture[str], config_dir: Path, env: str = "prod") -> str:
    code = cli(["validate", "--config-dir", str(config_dir), "--env", env])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err.removeprefix("kvtier validate: ")


def test_standalone_signals_load_with_keda_and_an_in_cluster_prometheus(config_copy: Path) -> None:
    _edit(config_copy, "environments/prod.yaml", _env(keda={"prometheus_url": IN_CLUSTER}))
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 2, "max_replicas": 2, "trigger": QUEUE}))
    endpoint = load_checked(config_copy, "prod").lob("support").endpoints[0]
    assert endpoint.autoscaling is not None
    assert endpoint.autoscaling.all_triggers == (SignalTrigger(signal="queue_per_replica", target=4),)


def test_standalone_without_keda(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(config_copy, "environments/prod.yaml", _env(keda={"source": "none", "prometheus_url": IN_CLUSTER}))
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 2, "max_replicas": 2, "trigger": QUEUE}))
    env = config_copy / "environments/prod.yaml"
    assert _one_line(capsys, config_copy) == (
        f"{config_copy / 'lobs/support.yaml'}: endpoints[0].autoscaling: a standalone endpoint scales through a KEDA "
        f"ScaledObject and keda.source is none in {env}; set keda.source there to existing (the cluster runs KEDA) "
        "or inference-operator (the add-on kvtier installs brings KEDA v2.17.1), or remove autoscaling and set replicas"
    )


def test_standalone_keda_from_an_add_on_the_environment_does_not_install(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """byoc installs the add-on by switch; with the switch off its KEDA is not kvtier's to count on."""

    def byoc(doc: Doc) -> None:
        doc["hyperpod"]["existing"]["install"]["inference_operator"] = False
        doc["lobs"] = ["support"]
        _amp(doc)

    _edit(config_copy, "environments/byoc.yaml", byoc)
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 2, "max_replicas": 2, "trigger": QUEUE}))
    line = _one_line(capsys, config_copy, "byoc")
    assert "endpoints[0].autoscaling: " in line and "add-on" in line and "does not install" in line
    _edit(config_copy, "environments/byoc.yaml", _env(keda={"source": "existing"}))
    assert load_checked(config_copy, "byoc").lob("support").endpoints[0].autoscaling is not None


def test_max_below_min(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 3, "max_replicas": 2, "trigger": QUEUE}))
    assert _one_line(capsys, config_copy).endswith(
        "endpoints[0].autoscaling.max_replicas: 2 is below min_replicas 3; use max >= min"
    )


def test_an_l2_signal_on_an_endpoint_without_l2(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(config_copy, "environments/prod.yaml", _env(keda={"prometheus_url": IN_CLUSTER}))
    trigger = {"signal": "l2_hit_tokens_per_replica", "target": 5000}
    change = _support({"min_replicas": 2, "max_replicas": 2, "triggers": [QUEUE, trigger]}, cache={"l2": "none"})
    _edit(config_copy, "lobs/support.yaml", change)
    line = _one_line(capsys, config_copy)
    assert "endpoints[0].autoscaling.triggers[1].signal: l2_hit_tokens_per_replica counts LMCache's L2 reads" in line
    assert "cache.l2: none" in line


def test_lmcache_metrics_on_an_endpoint_without_lmcache(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    amp = "https://aps-workspaces.us-west-2.amazonaws.com/workspaces/ws-0123abcd-4567"
    query = 'sum(rate(lmcache:num_hit_tokens_total{lob="support"}[5m]))'
    trigger = {"type": "prometheus", "server_address": amp, "query": query, "target_value": 100}
    change = _support({"min_replicas": 2, "max_replicas": 2, "trigger": trigger}, cache={"l1_gb": 0, "l2": "none"})
    _edit(config_copy, "lobs/support.yaml", change)
    line = _one_line(capsys, config_copy)
    assert "endpoints[0].autoscaling.trigger.query: the query reads LMCache series" in line


def test_standalone_signal_without_a_prometheus_address(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 2, "max_replicas": 2, "trigger": QUEUE}))
    line = _one_line(capsys, config_copy)
    assert "endpoints[0].autoscaling.trigger.signal: KEDA needs the address of the Prometheus" in line
    assert f"set keda.prometheus_url in {config_copy / 'environments/prod.yaml'}" in line


def test_operator_signal_needs_amp(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The operator's CRD takes only an AMP serverAddress: prod's in-cluster Prometheus cannot serve it."""
    change = _support({"min_replicas": 1, "max_replicas": 2, "trigger": QUEUE}, replicas=1)
    _edit(config_copy, "lobs/retail.yaml", change)
    line = _one_line(capsys, config_copy)
    assert "retail.yaml: endpoints[0].autoscaling.trigger.signal: the operator's KEDA queries only Amazon" in line
    _edit(config_copy, "environments/prod.yaml", lambda doc: _amp(doc, "us-east-1"))
    assert load_checked(config_copy, "prod").lob("retail").endpoints[0].autoscaling is not None


def test_signals_need_recorded_rules(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def no_observability(doc: Doc) -> None:
        doc["observability"] = {"mode": "none"}

    _edit(config_copy, "environments/prod.yaml", no_observability)
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 2, "max_replicas": 2, "trigger": QUEUE}))
    assert "observability.mode is none" in _one_line(capsys, config_copy)


def test_trigger_and_triggers_are_one_or_the_other(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    both = {"min_replicas": 2, "max_replicas": 2, "trigger": QUEUE, "triggers": [QUEUE]}
    _edit(config_copy, "lobs/support.yaml", _support(both))
    assert "endpoints[0].autoscaling.trigger: both trigger and triggers are set" in _one_line(capsys, config_copy)


def test_an_unknown_signal_lists_the_known_ones(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    change = _support({"min_replicas": 2, "max_replicas": 2, "trigger": {"signal": "gpu_kv_usage", "target": 0.9}})
    _edit(config_copy, "lobs/support.yaml", change)
    line = _one_line(capsys, config_copy)
    assert "endpoints[0].autoscaling.trigger.signal: 'gpu_kv_usage' is not allowed" in line
    assert "queue_per_replica" in line


def test_a_standalone_maximum_counts_against_the_quota_and_the_gpu_groups(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """support's quota is 2 GPUs: an autoscaling maximum of 3 is refused though it runs 2 replicas today."""
    _edit(config_copy, "environments/prod.yaml", _env(keda={"prometheus_url": IN_CLUSTER}))
    _edit(config_copy, "lobs/support.yaml", _support({"min_replicas": 2, "max_replicas": 3, "trigger": QUEUE}))
    line = _one_line(capsys, config_copy)
    assert "support.yaml: gpu_quota: " in line and "raise gpu_quota to at least 3" in line
