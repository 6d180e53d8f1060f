"""LOB fences: quota arithmetic, schema validity, an emulation of the NetworkPolicies on sample flows, and an emulation
of how the LimitRange and the quota admit containers kvtier does not render.

No API server runs offline, so `_allowed` below evaluates NetworkPolicy ingress rules the way the Kubernetes API
documents them (union of policies selecting the pod; a rule matches when any peer matches and any port matches), and
`_admit` applies, in the API server's order, pod defaulting (requests = limits where only limits are set,
`SetDefaults_Pod`), the LimitRanger's defaults, the request <= limit validation and the quota's rule that every
container must state each resource the quota tracks.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvtier.config.curvine import cpu_millis, memory_bytes
from kvtier.config.loader import Config
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.isolation import add_isolation, load_balancer_cidrs, network_policies, quota
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR
from tests.validation import validate_k8s


@pytest.fixture(scope="module")
def prod_config() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def test_quota_follows_the_rule(prod_config: Config) -> None:
    retail = prod_config.lob("retail")
    hard = quota(prod_config.env, retail)
    assert hard["requests.nvidia.com/gpu"] == str(retail.gpu_quota)
    # ml.g6e.4xlarge: 16 vCPU and 128 GiB per GPU; plus 8 CPU / 16 GiB for routers, janitor and benchmarks.
    assert hard["requests.cpu"] == str(retail.gpu_quota * 16 + 8)
    assert hard["requests.memory"] == f"{retail.gpu_quota * 128 + 16}Gi"
    # A standalone endpoint's routers on top (issue 38): two replicas and one rollout pod, 0.5 CPU and 1 GiB each.
    support = prod_config.lob("support")
    hard = quota(prod_config.env, support)
    assert hard["requests.cpu"] == str(support.gpu_quota * 16 + 8 + 2)
    assert hard["requests.memory"] == f"{support.gpu_quota * 128 + 16 + 3}Gi"


def _fences(config: Config, lob: str) -> tuple[dict[str, Any], dict[str, Any]]:
    chart = KvtierChart(chart_app(), f"fences-{lob}")
    add_isolation(chart, config.env, config.lob(lob))
    objects = {o["kind"]: o for o in chart.manifests()}
    return objects["LimitRange"], objects["ResourceQuota"]


def _admit(container: dict[str, Any], limit_range: dict[str, Any], resource_quota: dict[str, Any]) -> str | None:
    """Why the API server would reject this container in the LOB namespace, or None (module doc)."""
    resources = {k: dict(v) for k, v in container.get("resources", {}).items()}
    limits, requests = resources.setdefault("limits", {}), resources.setdefault("requests", {})
    if limits and not requests:
        requests.update(limits)  # SetDefaults_Pod
    (item,) = limit_range["spec"]["limits"]
    for name, value in item.get("default", {}).items():
        limits.setdefault(name, value)
    for name, value in item.get("defaultRequest", {}).items():
        requests.setdefault(name, value)
    for name, limit in limits.items():
        amount = cpu_millis if name == "cpu" else memory_bytes
        if name in requests and amount(requests[name]) > amount(limit):
            return f"{name} request {requests[name]} exceeds its limit {limit}"
    for tracked in resource_quota["spec"]["hard"]:
        kind, _, name = tracked.partition(".")
        if name in ("cpu", "memory") and name not in (limits if kind == "limits" else requests):
            return f"must specify {tracked}"
    return None


SIDECARS: list[dict[str, Any]] = [  # sizes the operator does not publish: any of these may appear
    {"name": "big-proxy", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}},
    {"name": "limited", "resources": {"limits": {"cpu": "50m", "memory": "64Mi"}}},
    {"name": "bare"},
    {"name": "memory-only", "resources": {"requests": {"memory": "3Gi"}}},
]


@pytest.mark.parametrize("container", SIDECARS, ids=[c["name"] for c in SIDECARS])
def test_no_default_can_reject_a_container_kvtier_does_not_render(
    prod_config: Config, container: dict[str, Any]
) -> None:
    limit_range, resource_quota = _fences(prod_config, "retail")
    assert _admit(container, limit_range, resource_quota) is None
    assert not any(k.startswith("limits.") for k in resource_quota["spec"]["hard"])  # the quota counts requests


def test_the_emulation_rejects_what_default_limits_would() -> None:
    """With default limits (what kvtier had), a sidecar asking more than them is refused: the emulation sees it."""
    old_range = {"spec": {"limits": [{"type": "Container", "default": {"cpu": "1", "memory": "1Gi"}}]}}
    old_quota = {"spec": {"hard": {"requests.cpu": "40", "limits.cpu": "40"}}}
    assert _admit(SIDECARS[0], old_range, old_quota) == "cpu request 2 exceeds its limit 1"
    assert _admit({"name": "bare"}, {"spec": {"limits": [{}]}}, old_quota) == "must specify requests.cpu"


def test_isolation_objects_validate(prod_config: Config) -> None:
    for lob in prod_config.lobs:
        chart = KvtierChart(chart_app(), f"isolation-{lob.name}")
        add_isolation(chart, prod_config.env, lob)
        kinds = []
        for obj in chart.manifests():
            validate_k8s(obj)
            # Operator endpoints' router policies live in the operator's namespace (issue 33).
            if obj["metadata"]["namespace"] == "hyperpod-inference-system":
                assert obj["kind"] == "NetworkPolicy", obj
            else:
                assert obj["metadata"]["namespace"] == f"kvtier-{lob.name}"
            kinds.append(obj["kind"])
        assert {"ResourceQuota", "LimitRange", "ServiceAccount", "NetworkPolicy"} <= set(kinds)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        value = labels.get(expr["key"])
        op = expr["operator"]
        if (op == "In" and value not in expr["values"]) or (op == "NotIn" and value in expr["values"]):
            return False
        if (op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None):
            return False
    return True


Pod = tuple[str, dict[str, str], dict[str, str], str]  # namespace, namespace labels, pod labels, ip


def _allowed(policies: list[dict[str, Any]], source: Pod, target: Pod, port: int) -> bool:
    src_ns, src_ns_labels, src_labels, src_ip = source
    dst_ns, _, dst_labels, _ = target
    selecting = [
        p for p in policies if p["metadata"]["namespace"] == dst_ns and _selects(p["spec"]["podSelector"], dst_labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(p["port"] == port for p in ports):
                continue
            for peer in rule.get("from", []):
                if "ipBlock" in peer:
                    import ipaddress

                    if ipaddress.ip_address(src_ip) in ipaddress.ip_network(peer["ipBlock"]["cidr"]):
                        return True
                    continue
                ns_ok = (
                    _selects(peer["namespaceSelector"], src_ns_labels)
                    if "namespaceSelector" in peer
                    else src_ns == dst_ns
                )
                pod_ok = _selects(peer["podSelector"], src_labels) if "podSelector" in peer else True
                if ns_ok and pod_ok:
                    return True
    return False


def test_flows_between_and_into_lobs(prod_config: Config) -> None:
    cidrs = load_balancer_cidrs(prod_config.env)
    assert cidrs == ("10.20.0.0/24", "10.20.1.0/24", "10.20.2.0/24")  # the public subnets
    policies = [p for lob in prod_config.lobs for p in network_policies(lob, cidrs)]

    def lob_pod(lob: str, labels: dict[str, str]) -> Pod:
        return (
            f"kvtier-{lob}",
            {"kvtier.io/line-of-business": lob, "kubernetes.io/metadata.name": f"kvtier-{lob}"},
            labels,
            "10.96.0.10",
        )

    retail_engine = lob_pod("retail", {"app": "qwen3-8b"})
    support_router = lob_pod("support", {"app": "llama31-8b-router", "kvtier.io/component": "router"})
    support_engine = lob_pod("support", {"app": "llama31-8b", "kvtier.io/component": "engine"})
    outside = ("apps", {"kubernetes.io/metadata.name": "apps"}, {"app": "web"}, "10.96.5.5")
    operator = (
        "hyperpod-inference-system",
        {"kubernetes.io/metadata.name": "hyperpod-inference-system"},
        {"app": "r"},
        "10.96.9.9",
    )
    load_balancer: Pod = ("", {}, {}, "10.20.1.4")
    other_lob_pod_ip: Pod = ("kvtier-support", {"kvtier.io/line-of-business": "support"}, {"app": "x"}, "10.20.64.9")
    prometheus = ("monitoring", {"kvtier.io/metrics-scraper": "true"}, {"app": "prometheus"}, "10.96.7.7")

    assert not _allowed(policies, support_engine, retail_engine, 8000)  # no traffic between LOBs
    assert not _allowed(policies, retail_engine, support_router, 80)
    assert _allowed(policies, support_router, support_engine, 8000)  # its router to its workers
    assert _allowed(policies, outside, support_router, 8000)  # clients reach routers
    assert not _allowed(policies, outside, support_engine, 8000)  # but not engines directly
    assert _allowed(policies, operator, retail_engine, 8000)  # operator mode: the operator's router
    assert _allowed(policies, load_balancer, retail_engine, 8080)  # and its load balancer (pod IPs in the VPC)
    assert not _allowed(policies, operator, support_engine, 8000)
    assert not _allowed(
        policies, other_lob_pod_ip, retail_engine, 8000
    )  # pod IPs are VPC IPs, but not LB subnets  # standalone engines are not the operator's
    assert _allowed(policies, prometheus, support_engine, 8000)  # metrics scrapes
    assert not _allowed(policies, prometheus, support_engine, 9000)
