"""Observability objects of a synthesized environment: valid against the pinned Prometheus Operator CRDs and the
Kubernetes schema, consistent with the network policies, and written to dist/."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.app.dist import write_dist
from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.isolation import METRICS_SCRAPER_LABEL
from kvtier.k8s.observability.dashboards import dashboards, endpoint_panels, overview_panels
from kvtier.k8s.observability.scrape import JANITOR_METRICS_PORT
from tests.support import ROOT, Synth
from tests.validation import crd_errors, validate_k8s

CRDS = ROOT / "tests" / "crds" / "prometheus-operator"
CRD_FILES = {
    "PodMonitor": CRDS / "monitoring.coreos.com_podmonitors.yaml",
    "ServiceMonitor": CRDS / "monitoring.coreos.com_servicemonitors.yaml",
    "PrometheusRule": CRDS / "monitoring.coreos.com_prometheusrules.yaml",
}


def _objects(synth: Synth) -> Iterator[dict[str, Any]]:
    for stack in synth.stacks.all:
        for chart in stack.outputs.charts:
            yield from chart.manifests()


def _monitoring(synth: Synth) -> list[dict[str, Any]]:
    return [o for o in _objects(synth) if o["apiVersion"].startswith("monitoring.coreos.com/")]


def test_the_crds_are_the_pinned_release() -> None:
    for path in CRD_FILES.values():
        crd = yaml.safe_load(path.read_text())
        assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == "0.93.0", path
    source = (CRDS / "README.md").read_text()
    assert "v0.93.0" in source and "f8fafd475f3d132e239432ae6172de60a6cb6516" in source
    script = (ROOT / "scripts" / "fetch-crds.sh").read_text()
    assert 'PROM_OPERATOR_TAG="v0.93.0"' in script and "tests/crds/prometheus-operator/" in script


def test_monitoring_objects_validate_against_the_upstream_crds(dev: Synth, prod: Synth) -> None:
    for synth in (dev, prod):
        objects = _monitoring(synth)
        kinds = {o["kind"] for o in objects}
        assert kinds == set(CRD_FILES), kinds
        for obj in objects:
            assert crd_errors(CRD_FILES[obj["kind"]], "v1", obj) == [], obj["metadata"]


def test_a_misspelled_field_fails_the_crd_check(dev: Synth) -> None:
    monitor = next(o for o in _monitoring(dev) if o["kind"] == "PodMonitor")
    broken = json.loads(json.dumps(monitor))
    broken["spec"]["podMetricsEndpoints"][0]["portNumbr"] = 8000
    assert crd_errors(CRD_FILES["PodMonitor"], "v1", broken)


def test_dashboard_configmaps_carry_the_sidecar_label(dev: Synth) -> None:
    dashboards = {"kvtier-overview", "kvtier-endpoint"}
    maps = [o for o in _objects(dev) if o["kind"] == "ConfigMap" and o["metadata"]["name"] in dashboards]
    assert len(maps) == len(dashboards)
    for cm in maps:
        validate_k8s(cm)
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "monitoring"
        (text,) = cm["data"].values()
        assert json.loads(text)["uid"] == cm["metadata"]["name"]


def test_every_lob_namespace_and_curvine_are_scraped(prod: Synth) -> None:
    objects = _monitoring(prod)
    namespaces = {o["metadata"]["namespace"] for o in objects if o["kind"] == "PodMonitor"}
    assert namespaces == {curvine.NAMESPACE} | {f"kvtier-{s.lob.name}" for s in prod.stacks.lobs}
    for obj in objects:  # kube-prometheus-stack's Prometheus selects by its release label
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_network_policies_admit_scrapers_on_every_scraped_lob_port(prod: Synth) -> None:
    for stack in prod.stacks.lobs:
        namespace = f"kvtier-{stack.lob.name}"
        objects = [o for c in stack.outputs.charts for o in c.manifests()]
        (policy,) = [o for o in objects if o["metadata"]["name"] == "allow-metrics-scrapes"]
        (rule,) = policy["spec"]["ingress"]
        assert rule["from"] == [{"namespaceSelector": {"matchLabels": {METRICS_SCRAPER_LABEL: "true"}}}]
        allowed = {p["port"] for p in rule["ports"]}
        scraped = {
            e["portNumber"]
            for o in objects
            if o["kind"] == "PodMonitor" and o["metadata"]["namespace"] == namespace
            for e in o["spec"]["podMetricsEndpoints"]
        }
        assert scraped == allowed and JANITOR_METRICS_PORT in scraped, (namespace, scraped, allowed)


def test_engine_monitors_select_every_endpoint_and_label_lob_and_endpoint(prod: Synth) -> None:
    for stack in prod.stacks.lobs:
        objects = [o for c in stack.outputs.charts for o in c.manifests()]
        (engines,) = [o for o in objects if o["metadata"].get("name") == "kvtier-engines"]
        app, component = engines["spec"]["selector"]["matchExpressions"]
        assert app == {"key": "app", "operator": "In", "values": sorted(e.name for e in stack.lob.endpoints)}
        assert component == {"key": "kvtier.io/component", "operator": "NotIn", "values": ["router", "l2-janitor"]}
        targets = {r["targetLabel"] for r in engines["spec"]["podMetricsEndpoints"][0]["relabelings"]}
        assert targets == {"lob", "kvtier_endpoint", "kvtier_component"}


def test_every_lob_monitor_stamps_its_component(prod: Synth) -> None:
    """Rules select engines by `kvtier_component`, so each LOB monitor sets it: engine, router, janitor."""
    for stack in prod.stacks.lobs:
        objects = [o for c in stack.outputs.charts for o in c.manifests() if o["kind"] == "PodMonitor"]
        stamped = {
            o["metadata"]["name"]: r["replacement"]
            for o in objects
            for r in o["spec"]["podMetricsEndpoints"][0]["relabelings"]
            if r["targetLabel"] == "kvtier_component"
        }
        expected = {"kvtier-engines": "engine", "kvtier-janitor": "janitor"}
        if any(e.mode == "standalone" for e in stack.lob.endpoints):
            expected["kvtier-routers"] = "router"
        assert stamped == expected, stack.lob.name


def test_hyperpod_addon_mode_loads_rules_into_amp(tmp_path_factory: pytest.TempPathFactory) -> None:
    from tests.support import synthesize

    byoc = synthesize("byoc", tmp_path_factory.mktemp("cdk-byoc-obs"))
    namespaces = [
        r
        for t in byoc.templates.values()
        for r in t["Resources"].values()
        if r["Type"] == "AWS::APS::RuleGroupsNamespace"
    ]
    names = sorted(r["Properties"]["Name"] for r in namespaces)
    assert names == ["kvtier-byoc", "kvtier-byoc-retail"]
    for r in namespaces:
        assert r["Properties"]["Workspace"].startswith("arn:aws:aps:us-west-2:111122223333:workspace/ws-")
        assert yaml.safe_load(r["Properties"]["Data"])["groups"]
    assert not list(_monitoring(byoc))  # no CRD objects where the operator is not used


def test_dist_gets_rule_files_and_dashboards(dev: Synth, tmp_path: Path) -> None:
    target = write_dist(tmp_path / "dist", "dev", {s.stack_name: s.outputs for s in dev.stacks.all})
    platform = target / "kvtier-dev-platform" / "observability"
    assert {p.name for p in (platform / "dashboards").iterdir()} == set(dashboards())
    assert (platform / "kvtier.rules.yaml").exists()
    assert (target / "kvtier-dev-retail" / "observability" / "kvtier-retail.rules.yaml").exists()
    assert "observability/kvtier.rules.yaml" in (target / "kvtier-dev-platform" / "README.md").read_text()


def test_dashboards_show_the_panels_the_issue_asks_for() -> None:
    overview = " ".join(p.title for p in overview_panels())
    for words in ("Hit rate per tier", "TTFT p50 / p90", "L2 used vs budget", "Curvine"):
        assert words in overview
    endpoint = {q.expr.split("{")[0] for p in endpoint_panels() for q in p.queries}
    assert {f"lob_endpoint:kvtier_{t}_hit:ratio5m" for t in ("l0", "l1", "l2")} <= endpoint
    for board in dashboards().values():
        assert board["schemaVersion"] >= 39 and all(
            t["datasource"]["uid"] == "${datasource}" for p in board["panels"] for t in p["targets"]
        )
