"""Names, labels and in-cluster URLs of an endpoint's objects, so other charts (benchmarks, policies) can compute them.

Design "Names and limits": the InferenceEndpointConfig and the standalone Deployment take the endpoint's name; the
router Service takes it too (the endpoint's address); the router Deployment adds `-router` (28 + 7 characters, within 63).
"""

from __future__ import annotations

from kvtier.naming import lob_namespace

ENGINE_PORT = 8000  # vLLM's API, /health and /metrics
ROUTER_PORT = 80  # router Service port (standalone)
ROUTER_CONTAINER_PORT = 8000
ROUTER_METRICS_PORT = 29000  # vllm-router's Prometheus exporter (--prometheus-port; its default)
# Operator mode: router pods live in the operator's namespace, labelled app=<endpoint>-<namespace>-router and serving
# on 8081 (TipTopBin/curvine@98941129 docs-vllm/deploy.md; one source, docs/references.md "Router target of the Job").
OPERATOR_NAMESPACE = "hyperpod-inference-system"
OPERATOR_ROUTER_PORT = 8081
ENGINE_CONTAINER = "engine"  # not `vllm`: the router probes /is_sleeping on containers of that name (dev-mode endpoint)
POLICY_NAME = "kvtier-l2-curvine"  # each LOB's Kyverno Policy
ENDPOINT_LABEL = "kvtier.io/endpoint"
COMPONENT_LABEL = "kvtier.io/component"


def engine_labels(endpoint: str) -> dict[str, str]:
    """Labels of standalone vLLM pods (`app` as on operator pods, so one `kubectl -l app=<endpoint>` works)."""
    return {"app": endpoint, ENDPOINT_LABEL: endpoint, COMPONENT_LABEL: "engine"}


def engine_service_name(endpoint: str) -> str:
    return f"{endpoint}-engine"


def router_name(endpoint: str) -> str:
    return f"{endpoint}-router"


def router_service_name(endpoint: str) -> str:
    """The standalone router Service in the LOB namespace: the endpoint's address, so it takes the endpoint's name
    (design "Names and limits"). The router Deployment is `<endpoint>-router`, beside the engine Deployment."""
    return endpoint


def router_labels(endpoint: str) -> dict[str, str]:
    return {"app": router_name(endpoint), ENDPOINT_LABEL: endpoint, COMPONENT_LABEL: "router"}


def service_host(name: str, namespace: str) -> str:
    return f"{name}.{namespace}.svc.cluster.local"


def operator_router_service_name(lob: str, endpoint: str) -> str:
    """kvtier's Service in front of the operator's router pods (in the operator's namespace, so it names the LOB)."""
    return f"{lob}-{endpoint}-router"


def operator_router_pod_label(lob: str, endpoint: str) -> str:
    return f"{endpoint}-{lob_namespace(lob)}-router"


def endpoint_url(lob: str, endpoint: str, mode: str) -> str:
    """Base URL (no path) that clients in the cluster call: the endpoint's router in either mode."""
    if mode == "standalone":
        return f"http://{service_host(router_service_name(endpoint), lob_namespace(lob))}:{ROUTER_PORT}"
    host = service_host(operator_router_service_name(lob, endpoint), OPERATOR_NAMESPACE)
    return f"http://{host}:{OPERATOR_ROUTER_PORT}"
