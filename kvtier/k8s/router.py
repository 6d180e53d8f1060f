"""Standalone mode: per endpoint a vLLM production-stack router (Deployment, Service, RBAC) on system nodes.

The router finds the endpoint's vLLM pods through the Kubernetes API (pod-IP discovery by label, RBAC on pods) and
routes by one of four strategies (vllm-project/production-stack `src/vllm_router/routers/routing_logic.py`;
docs/references.md "Standalone mode"):
- `prefixaware`: longest match of the prompt text (or the concatenated chat messages) in 128-character chunks
  against what it has routed before;
- `session`: consistent hash of the `x-session-id` header (SESSION_HEADER); requests without it go to the least
  loaded pod;
- `kvaware`: asks the LMCache controller embedded in the router which pod holds the longest prefix of the tokenized
  `prompt` (completions API only; chat `messages` are not tokenized) and falls back to session/QPS. The router
  image bundles lmcache 0.3.11 and the standalone engine runs 0.4.3, whose controller protocol changed: expect
  registration to fail until both use one LMCache version (ROUTER_LMCACHE_VERSION in versions.py);
- `roundrobin`.
"""

from __future__ import annotations

from typing import Any

from kvtier.config.endpoint import Endpoint, HuggingFaceModel
from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.endpoint_names import (
    COMPONENT_LABEL,
    ENDPOINT_LABEL,
    ENGINE_PORT,
    ROUTER_CONTAINER_PORT,
    ROUTER_PORT,
    router_labels,
    router_name,
    router_service_name,
)
from kvtier.k8s.placement import placement
from kvtier.k8s.security import container_security_context, pod_security_context, tmp_volume
from kvtier.naming import lob_namespace
from kvtier.serving import (
    CONTROLLER_HEARTBEAT_PORT,
    CONTROLLER_PULL_PORT,
    CONTROLLER_REPLY_PORT,
    KV_AWARE_THRESHOLD,
    SESSION_HEADER,
    hash_seed_env,
)
from kvtier.versions import ROUTER_IMAGE

__all__ = ["SESSION_HEADER", "add_router", "router_service_name"]

ENGINE_STATS_INTERVAL_S = 15


def _controller_ports() -> list[tuple[str, int]]:
    return [
        ("lmc-pull", CONTROLLER_PULL_PORT),
        ("lmc-reply", CONTROLLER_REPLY_PORT),
        ("lmc-heartbeat", CONTROLLER_HEARTBEAT_PORT),
    ]


def router_args(lob: str, endpoint: Endpoint) -> list[str]:
    selector = f"{ENDPOINT_LABEL}={endpoint.name},{COMPONENT_LABEL}=engine"
    args = [
        "--host",
        "0.0.0.0",
        "--port",
        str(ROUTER_CONTAINER_PORT),
        "--service-discovery",
        "k8s",
        "--k8s-service-discovery-type",
        "pod-ip",
        "--k8s-namespace",
        lob_namespace(lob),
        "--k8s-label-selector",
        selector,
        "--k8s-port",
        str(ENGINE_PORT),
        "--routing-logic",
        endpoint.routing,
        "--engine-stats-interval",
        str(ENGINE_STATS_INTERVAL_S),
    ]
    if endpoint.routing in ("session", "kvaware"):  # kvaware falls back to the session key
        args += ["--session-key", SESSION_HEADER]
    if endpoint.routing == "kvaware":
        args += [
            "--lmcache-controller-port",
            str(CONTROLLER_PULL_PORT),
            "--lmcache-controller-reply-port",
            str(CONTROLLER_REPLY_PORT),
            "--lmcache-controller-heartbeat-port",
            str(CONTROLLER_HEARTBEAT_PORT),
            "--kv-aware-threshold",
            str(KV_AWARE_THRESHOLD),
        ]
    return args


def _router_env(endpoint: Endpoint) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [hash_seed_env()]  # kvaware hashes chunks like the engines do
    model = endpoint.model
    if endpoint.routing == "kvaware" and isinstance(model, HuggingFaceModel) and model.token_secret:
        # kvaware loads the tokenizer of the served model name from Hugging Face.
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": model.token_secret, "key": "token"}}})
    return env


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": period, "failureThreshold": failures}


def router_objects(env: Environment, lob: str, endpoint: Endpoint) -> list[dict[str, Any]]:
    namespace = lob_namespace(lob)
    name = router_name(endpoint.name)
    labels = router_labels(endpoint.name)
    kvaware = endpoint.routing == "kvaware"
    memory = "2Gi" if kvaware else "1Gi"  # kvaware holds a tokenizer
    ports: list[dict[str, Any]] = [{"name": "http", "containerPort": ROUTER_CONTAINER_PORT}]
    service_ports: list[dict[str, Any]] = [{"name": "http", "port": ROUTER_PORT, "targetPort": "http"}]
    if kvaware:
        ports += [{"name": n, "containerPort": p} for n, p in _controller_ports()]
        service_ports += [{"name": n, "port": p, "targetPort": n} for n, p in _controller_ports()]
    meta = {"name": name, "namespace": namespace, "labels": labels}
    tmp = tmp_volume()
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            # get/list/watch for pod-IP discovery; patch for the router's sleep-mode label.
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list", "patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                # One replica: prefix-aware and kv-aware state lives in the router's memory.
                "replicas": 1,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "selector": {"matchLabels": {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "router"}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        **placement(env, "system").pod_spec(),
                        # The router discovers engine pods through the API (its Role): it keeps its token.
                        "serviceAccountName": name,
                        # The image (production-stack docker/Dockerfile) has no USER but world-readable files, and
                        # the router writes nothing but /tmp.
                        "securityContext": pod_security_context(non_root=True),
                        "volumes": [tmp[0]],
                        "containers": [
                            {
                                "name": "router",
                                "image": endpoint.router_image or ROUTER_IMAGE,
                                "imagePullPolicy": "IfNotPresent",
                                "args": router_args(lob, endpoint),
                                "env": _router_env(endpoint),
                                "ports": ports,
                                "resources": {
                                    "requests": {"cpu": "500m", "memory": memory},
                                    "limits": {"cpu": "2", "memory": memory},
                                },
                                "readinessProbe": _probe(5, 3),
                                "livenessProbe": _probe(15, 4),
                                "securityContext": container_security_context(read_only_root=True),
                                "volumeMounts": [tmp[1]],
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": router_service_name(endpoint.name), "namespace": namespace, "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "router"},
                "ports": service_ports,
            },
        },
    ]


def add_router(chart: KvtierChart, env: Environment, lob: str, endpoint: Endpoint) -> None:
    for obj in router_objects(env, lob, endpoint):
        api_object(chart, f"router-{obj['kind'].lower()}", obj)
