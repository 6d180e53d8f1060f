"""Chart builders of the observability wiring, and the plain files dist/ gets in every mode.

`prometheus-operator` mode applies: per LOB its PodMonitors and a PrometheusRule (LOB stack); Curvine's monitors,
the environment's PrometheusRule and the dashboard ConfigMaps (platform stack). The same rule groups are written to
`dist/<env>/<stack>/observability/*.rules.yaml` (promtool and AMP read that format) and the dashboards to
`dist/<env>/platform/observability/dashboards/*.json` in every mode.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine.names import NAMESPACE as CURVINE_NAMESPACE
from kvtier.k8s.observability.dashboards import dashboards
from kvtier.k8s.observability.rules import lob_groups, platform_groups
from kvtier.k8s.observability.scrape import API_VERSION, curvine_monitors, lob_monitors
from kvtier.naming import lob_namespace

FILES_DIR = "observability"


def rule_file(groups: list[dict[str, Any]]) -> str:
    """A Prometheus rule file (`groups:`), the format of promtool, Prometheus and AMP rule groups namespaces."""
    return yaml.safe_dump({"groups": groups}, sort_keys=False, width=1000)


def prometheus_rule(name: str, namespace: str, env: Environment, groups: list[dict[str, Any]]) -> dict[str, Any]:
    operator = env.observability.prometheus_operator
    assert operator is not None
    return {
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(operator.selector_labels)},
        "spec": {"groups": groups},
    }


def dashboard_configmaps(env: Environment) -> list[dict[str, Any]]:
    operator = env.observability.prometheus_operator
    assert operator is not None
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": file.removesuffix(".json"),
                "namespace": operator.dashboards_namespace,
                "labels": dict(operator.dashboard_label),
            },
            "data": {file: json.dumps(board, indent=1, sort_keys=True)},
        }
        for file, board in dashboards().items()
    ]


def add_platform_observability(chart: KvtierChart, env: Environment) -> None:
    for obj in curvine_monitors(env.observability):
        api_object(chart, f"{obj['kind']}-{obj['metadata']['name']}", obj)
    api_object(chart, "rules", prometheus_rule("kvtier", CURVINE_NAMESPACE, env, platform_groups(env)))
    for obj in dashboard_configmaps(env):
        api_object(chart, f"dashboard-{obj['metadata']['name']}", obj)


def add_lob_observability(chart: KvtierChart, env: Environment, lob: LineOfBusiness) -> None:
    namespace = lob_namespace(lob.name)
    for obj in lob_monitors(lob, env.observability):
        api_object(chart, f"{obj['kind']}-{obj['metadata']['name']}", obj)
    api_object(chart, "rules", prometheus_rule(f"kvtier-{lob.name}", namespace, env, lob_groups(env, lob)))


def platform_files(env: Environment) -> dict[str, str]:
    files = {f"{FILES_DIR}/kvtier.rules.yaml": rule_file(platform_groups(env))}
    for file, board in dashboards().items():
        files[f"{FILES_DIR}/dashboards/{file}"] = json.dumps(board, indent=2, sort_keys=True) + "\n"
    return files


def lob_files(env: Environment, lob: LineOfBusiness) -> dict[str, str]:
    return {f"{FILES_DIR}/kvtier-{lob.name}.rules.yaml": rule_file(lob_groups(env, lob))}
