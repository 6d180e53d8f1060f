"""A line of business's fences: ResourceQuota, LimitRange and NetworkPolicies in its namespace.

Quota rule: GPUs = the LOB's `gpu_quota`; CPU and memory = `gpu_quota` x the largest per-GPU share (vCPU, RAM) of
the instance types its endpoints use, plus a fixed allowance for the janitor and benchmark Jobs, plus the routers of
its standalone endpoints (two replicas and one rollout pod each, issue 38). The quota is a ceiling that keeps one LOB
from starving the others on shared nodes, not a reservation.

Requests only: the quota counts `requests.*`, what the scheduler reserves, and never `limits.*`. A quota on limits
makes every container declare limits, so the LimitRange would have to invent them, and an invented limit below a
container's own request (an operator-rendered sidecar whose size nobody publishes) makes the API server reject the
pod. The LimitRange therefore sets only a default *request* for containers without one; a container with limits
but no requests gets requests = limits from the API server first, so no default can contradict what a container
says (docs/endpoints.md, docs/references.md).

Network rule: nothing reaches a LOB's pods unless allowed below. Pods of the same namespace talk freely (router to
engines, benchmark to router, LMCache workers to the kvaware controller). Routers also accept clients from any
namespace that is not another LOB's. Operator-mode engines accept the operator's namespace (its router and
health checks) and the load balancer subnets (the operator's ALB sends to pod IPs from there): the public subnets
of a VPC kvtier creates, or `existing.load_balancer_cidrs`. Not the whole VPC: with the VPC CNI, pod IPs are VPC
IPs, so that would let other LOBs in. Metrics scrapers are allowed from namespaces labelled
`kvtier.io/metrics-scraper=true`, on the ports kvtier's PodMonitors scrape (engines, routers, janitors).

Egress (issue 33) is an allow-list, `lob_egress`: the LOB's own pods, DNS, the EKS Pod Identity agent, HTTPS (the
VPC's interface endpoints and the EKS API in the private subnets, S3 through its gateway endpoint, Hugging Face
through the NAT), the LOB's operator routers, and the janitor's calls to the Curvine master's web port. A LOB
admin may edit these (NetworkPolicies are namespaced): they are defence in depth; what holds against that admin is
in the `curvine` and operator namespaces (kvtier/k8s/curvine/policies.py, `operator_router_policies`).

Operator endpoints: their router pods live in the operator's namespace, where kvtier adds one policy per endpoint
(`operator_router_policies`): only the LOB's own namespace and namespaces that are no LOB's, as standalone routers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.config.network import plan_subnets
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.curvine.janitor import COMPONENT as JANITOR
from kvtier.k8s.curvine.janitor import COMPONENT_LABEL as JANITOR_LABEL
from kvtier.k8s.endpoint_names import (
    COMPONENT_LABEL,
    OPERATOR_NAMESPACE,
    OPERATOR_ROUTER_PORT,
    operator_router_pod_label,
    operator_router_service_name,
)
from kvtier.k8s.namespace import LOB_LABEL
from kvtier.k8s.observability.scrape import lob_scrape_ports
from kvtier.k8s.router import ROUTER_CPU_MILLIS, ROUTER_MEMORY_GIB, ROUTER_REPLICAS, ROUTER_SURGE
from kvtier.naming import MODEL_READER_SA, lob_namespace

# The LOB's pods without a GPU: benchmark Jobs on system nodes, and the L2 janitor on GPU nodes (only there is L2
# mounted); this allowance, on top of the GPU share and the routers, bounds them.
SYSTEM_ALLOWANCE_CPU = 8
SYSTEM_ALLOWANCE_MEMORY_GIB = 16
METRICS_SCRAPER_LABEL = "kvtier.io/metrics-scraper"
# The old manifests (no policy in `curvine`, LOB ingress only, no operator-namespace policy): the connectivity tests'
# proof that their assertions fail without this policies (tests/k8s/connectivity.py).
BREAK_SWITCH = "KVTIER_ISOLATION_BREAK"
# A container without its own requests gets these (LimitRange defaultRequest); no default limits (module doc).
DEFAULT_REQUEST = {"cpu": "100m", "memory": "128Mi"}


def isolation_broken() -> bool:
    return os.environ.get(BREAK_SWITCH) == "1"


def quota(env: Environment, lob: LineOfBusiness) -> dict[str, str]:
    """The LOB's ResourceQuota `hard` limits (see the module doc for the rule)."""
    shares = [env.instance(e.instance_type) for e in lob.endpoints]
    cpu_per_gpu = max(i.vcpus / i.gpus for i in shares)
    memory_per_gpu = max(i.memory_gib / i.gpus for i in shares)
    routers = sum(1 for e in lob.endpoints if e.mode == "standalone") * (ROUTER_REPLICAS + ROUTER_SURGE)
    cpu = math.ceil(lob.gpu_quota * cpu_per_gpu) + SYSTEM_ALLOWANCE_CPU + math.ceil(routers * ROUTER_CPU_MILLIS / 1000)
    memory = math.ceil(lob.gpu_quota * memory_per_gpu) + SYSTEM_ALLOWANCE_MEMORY_GIB + routers * ROUTER_MEMORY_GIB
    return {
        "requests.nvidia.com/gpu": str(lob.gpu_quota),
        "requests.cpu": str(cpu),
        "requests.memory": f"{memory}Gi",
    }


def _policy(name: str, namespace: str, pod_selector: dict[str, Any], ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": pod_selector, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def _egress_policy(
    name: str, namespace: str, pod_selector: dict[str, Any], egress: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": pod_selector, "policyTypes": ["Egress"], "egress": egress},
    }


# EKS Pod Identity agent (host network, link-local): https://docs.aws.amazon.com/eks/latest/userguide/pod-id-how-it-works.html
POD_IDENTITY_AGENT = "169.254.170.23/32"
POD_IDENTITY_PORT = 80
HTTPS_PORT = 443
DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def lob_egress(lob: LineOfBusiness) -> list[dict[str, Any]]:
    """The LOB namespace's egress allow-list (module doc); each destination is one rule, in this order."""
    namespace = lob_namespace(lob.name)
    rules: list[dict[str, Any]] = [
        {"to": [{"podSelector": {}}]},  # the LOB's own routers, engines, controllers, benchmarks
        {"to": [DNS_PEER], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": _tcp(POD_IDENTITY_PORT)},
        # HTTPS, wherever it goes: the interface endpoints and the EKS API's network interfaces sit in the same private
        # subnets as the pods (kvtier/constructs/network.py), so "outside the cluster's ranges" would have to add them
        # back; S3 through its gateway endpoint (S3's public addresses), Hugging Face through the NAT. No Curvine or
        # kvtier port is 443, and every LOB's and Curvine's pods deny ingress by default.
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": _tcp(HTTPS_PORT)},
    ]
    if any(e.mode == "operator" for e in lob.endpoints):
        operator_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}}}
        rules.append({"to": [operator_ns], "ports": _tcp(OPERATOR_ROUTER_PORT)})  # its own endpoints' routers
    janitor_to_web = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": curvine.NAMESPACE}},
                "podSelector": {"matchLabels": curvine.component_labels("master")},
            }
        ],
        "ports": _tcp(curvine.MASTER_WEB_PORT),
    }
    return [
        _egress_policy("default-deny-egress", namespace, {}, []),
        _egress_policy("allow-egress", namespace, {}, rules),
        _egress_policy(
            "allow-janitor-to-curvine-web", namespace, {"matchLabels": {JANITOR_LABEL: JANITOR}}, [janitor_to_web]
        ),
    ]


def operator_router_policies(lob: LineOfBusiness) -> list[dict[str, Any]]:
    """One policy per operator endpoint in the operator's namespace (a LOB admin cannot edit it): its router pods
    admit the LOB's own namespace and namespaces that are no LOB's (the operator itself, scrapers, gateways)."""
    own = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": lob_namespace(lob.name)}}}
    not_a_lob = {"namespaceSelector": {"matchExpressions": [{"key": LOB_LABEL, "operator": "DoesNotExist"}]}}
    return [
        _policy(
            operator_router_service_name(lob.name, e.name),
            OPERATOR_NAMESPACE,
            {"matchLabels": {"app": operator_router_pod_label(lob.name, e.name)}},
            [{"from": [own, not_a_lob]}],
        )
        for e in sorted(lob.endpoints, key=lambda e: e.name)
        if e.mode == "operator"
    ]


def load_balancer_cidrs(env: Environment) -> tuple[str, ...]:
    """Where the operator's load balancer sends from: public subnets kvtier creates, or what the owner lists."""
    if env.hyperpod.existing is not None:
        return env.hyperpod.existing.load_balancer_cidrs
    subnets = plan_subnets(env.network.cidr, len(env.availability_zones), env.network.private_subnet_mask)
    assert subnets is not None  # the environment model refuses a CIDR that cannot hold them
    return tuple(str(s) for s in subnets[: len(env.availability_zones)])


def network_policies(lob: LineOfBusiness, lb_cidrs: Sequence[str]) -> list[dict[str, Any]]:
    namespace = lob_namespace(lob.name)
    not_a_lob = {"namespaceSelector": {"matchExpressions": [{"key": LOB_LABEL, "operator": "DoesNotExist"}]}}
    policies = [
        _policy("default-deny-ingress", namespace, {}, []),
        _policy("allow-same-namespace", namespace, {}, [{"from": [{"podSelector": {}}]}]),
        _policy(
            "allow-clients-to-routers",
            namespace,
            {"matchLabels": {COMPONENT_LABEL: "router"}},
            [{"from": [not_a_lob]}],
        ),
        _policy(
            "allow-metrics-scrapes",
            namespace,
            {},
            [
                {
                    "from": [{"namespaceSelector": {"matchLabels": {METRICS_SCRAPER_LABEL: "true"}}}],
                    "ports": [{"protocol": "TCP", "port": port} for port in lob_scrape_ports(lob)],
                }
            ],
        ),
    ]
    operator_endpoints = sorted(e.name for e in lob.endpoints if e.mode == "operator")
    if operator_endpoints:
        sources: list[dict[str, Any]] = [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}}}
        ]
        sources += [{"ipBlock": {"cidr": cidr}} for cidr in lb_cidrs]
        policies.append(
            _policy(
                "allow-operator-to-engines",
                namespace,
                {"matchExpressions": [{"key": "app", "operator": "In", "values": operator_endpoints}]},
                # All ports: the operator's in-pod proxy port is not documented (docs/references.md).
                [{"from": sources}],
            )
        )
    return policies


def add_isolation(chart: KvtierChart, env: Environment, lob: LineOfBusiness) -> None:
    namespace = lob_namespace(lob.name)
    api_object(
        chart,
        "quota",
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "lob-quota", "namespace": namespace},
            "spec": {"hard": quota(env, lob)},
        },
    )
    api_object(
        chart,
        "limits",
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "lob-defaults", "namespace": namespace},
            "spec": {"limits": [{"type": "Container", "defaultRequest": DEFAULT_REQUEST}]},
        },
    )
    api_object(
        chart,
        "model-reader",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": MODEL_READER_SA, "namespace": namespace},
        },
    )
    for policy in network_policies(lob, load_balancer_cidrs(env)):
        api_object(chart, policy["metadata"]["name"], policy)
    if isolation_broken():  # the old manifests: ingress only, operator routers open (tests/k8s/connectivity.py)
        return
    for policy in lob_egress(lob):
        api_object(chart, policy["metadata"]["name"], policy)
    for policy in operator_router_policies(lob):
        api_object(chart, f"operator-router-{policy['metadata']['name']}", policy)
