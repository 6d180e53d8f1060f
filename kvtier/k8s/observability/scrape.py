"""Scrape objects (Prometheus Operator `monitoring.coreos.com/v1`, CRDs pinned in tests/crds/prometheus-operator).

Per LOB namespace: engines (vLLM + LMCache on the engine port), standalone routers, the L2 janitor. In `curvine`:
masters and workers (their web ports serve /metrics), and the FUSE pods through kvtier's headless Service (the node
plugin builds those pods without ports). kube-state-metrics is scraped by kube-prometheus-stack itself.
The LOB network policy admits scrapers on exactly the LOB ports below (lob_scrape_ports, kvtier.k8s.isolation).
"""

from __future__ import annotations

from typing import Any

from kvtier.config.lob import LineOfBusiness
from kvtier.config.observability import ObservabilityConfig
from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.endpoint_names import COMPONENT_LABEL, ENGINE_PORT, ROUTER_METRICS_PORT
from kvtier.k8s.observability import metrics as m
from kvtier.naming import lob_namespace

API_VERSION = "monitoring.coreos.com/v1"
JANITOR_COMPONENT = "l2-janitor"  # pod label kvtier.io/component of the janitor pods
JANITOR_METRICS_PORT = 9400
# Operator engine pods carry only what the operator sets, `app=<endpoint>` (standalone ones add kvtier.io/component:
# engine); the router and janitor pods of the LOB carry kvtier.io/component, so the engine monitor selects
# `app In <endpoints>` minus those, and every LOB monitor stamps its series with `kvtier_component` (engine, router,
# janitor): rules select engines by that label, never by "has the endpoint label" (the router has it too).
ENGINE_POD_LABEL = "app"
NOT_ENGINE_COMPONENTS = ("router", JANITOR_COMPONENT)
# Ports the LOB monitors scrape: engines and routers (the same 8000), janitors.
LOB_SCRAPE_PORTS = tuple(sorted({ENGINE_PORT, ROUTER_METRICS_PORT, JANITOR_METRICS_PORT}))


def lob_scrape_ports(lob: LineOfBusiness) -> tuple[int, ...]:
    """The ports scraped in one LOB: the router's only where a standalone endpoint runs one."""
    routers = any(e.mode == "standalone" for e in lob.endpoints)
    return tuple(p for p in LOB_SCRAPE_PORTS if routers or p != ROUTER_METRICS_PORT)


def _relabel(source: str, target: str, regex: str = "(.*)") -> dict[str, Any]:
    return {
        "sourceLabels": [source],
        "targetLabel": target,
        "regex": regex,
        "replacement": "$1",
        "action": "replace",
    }


def _component(value: str) -> dict[str, Any]:
    return {"targetLabel": m.COMPONENT, "replacement": value, "action": "replace"}


def _lob_labels(*, endpoint: bool) -> list[dict[str, Any]]:
    out = [_relabel("__meta_kubernetes_namespace", m.LOB, "kvtier-(.*)")]
    if endpoint:
        out.append(_relabel(f"__meta_kubernetes_pod_label_{ENGINE_POD_LABEL}", m.ENDPOINT))
    return out


def _metadata(name: str, namespace: str, obs: ObservabilityConfig) -> dict[str, Any]:
    assert obs.prometheus_operator is not None
    return {"name": name, "namespace": namespace, "labels": dict(obs.prometheus_operator.selector_labels)}


def pod_monitor(
    name: str,
    namespace: str,
    obs: ObservabilityConfig,
    selector: dict[str, Any],
    *,
    port: int | None = None,
    port_name: str | None = None,
    relabelings: list[dict[str, Any]],
) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"path": "/metrics", "interval": f"{obs.scrape_interval_s}s", "relabelings": relabelings}
    if port is not None:
        endpoint["portNumber"] = port
    if port_name is not None:
        endpoint["port"] = port_name
    return {
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": _metadata(name, namespace, obs),
        "spec": {
            "selector": selector,
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [endpoint],
        },
    }


def lob_monitors(lob: LineOfBusiness, obs: ObservabilityConfig) -> list[dict[str, Any]]:
    namespace = lob_namespace(lob.name)
    endpoints = sorted(e.name for e in lob.endpoints)
    monitors = [
        pod_monitor(
            "kvtier-engines",
            namespace,
            obs,
            {
                "matchExpressions": [
                    {"key": ENGINE_POD_LABEL, "operator": "In", "values": endpoints},
                    {"key": COMPONENT_LABEL, "operator": "NotIn", "values": list(NOT_ENGINE_COMPONENTS)},
                ]
            },
            port=ENGINE_PORT,
            relabelings=[*_lob_labels(endpoint=True), _component(m.ENGINE_COMPONENT)],
        ),
        pod_monitor(
            "kvtier-janitor",
            namespace,
            obs,
            {"matchLabels": {COMPONENT_LABEL: JANITOR_COMPONENT}},
            port=JANITOR_METRICS_PORT,
            relabelings=[_component(m.JANITOR_COMPONENT)],  # the janitor labels its series with `lob` itself
        ),
    ]
    if any(e.mode == "standalone" for e in lob.endpoints):
        monitors.append(
            pod_monitor(
                "kvtier-routers",
                namespace,
                obs,
                {"matchLabels": {COMPONENT_LABEL: "router"}},
                port=ROUTER_METRICS_PORT,  # vllm-router's Prometheus exporter, not its API port
                relabelings=[
                    *_lob_labels(endpoint=False),
                    _relabel("__meta_kubernetes_pod_label_kvtier_io_endpoint", m.ENDPOINT),
                    _component(m.ROUTER_COMPONENT),
                ],
            )
        )
    return monitors


def curvine_monitors(obs: ObservabilityConfig) -> list[dict[str, Any]]:
    node = _relabel("__meta_kubernetes_pod_node_name", m.NODE)
    monitors = [
        pod_monitor(
            f"{curvine.NAMESPACE}-{component}",
            curvine.NAMESPACE,
            obs,
            {"matchLabels": curvine.component_labels(component)},
            port_name="web",
            relabelings=[_relabel("__meta_kubernetes_pod_label_app_kubernetes_io_component", m.COMPONENT), node],
        )
        for component in ("master", "worker")
    ]
    monitors.append(
        {
            "apiVersion": API_VERSION,
            "kind": "ServiceMonitor",
            "metadata": _metadata(f"{curvine.NAMESPACE}-fuse", curvine.NAMESPACE, obs),
            "spec": {
                "selector": {"matchLabels": curvine.component_labels("fuse")},
                "namespaceSelector": {"matchNames": [curvine.NAMESPACE]},
                "endpoints": [
                    {
                        "port": "metrics",
                        "path": "/metrics",
                        "interval": f"{obs.scrape_interval_s}s",
                        "relabelings": [
                            _component("fuse"),
                            node,
                        ],
                    }
                ],
            },
        }
    )
    return monitors
