"""Who may reach Curvine: the `curvine` namespace's policies, the L2 fence's per-node policies, and the check that no
`ipBlock` admitted to Curvine covers an address a pod can get (the evaluator treats ipBlocks as disjoint from pods,
so this is the half it cannot see: tests/k8s/connectivity.py).

What each flow is evaluated as is tests/k8s/test_connectivity.py (network-config-analyzer); here the shapes.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kvtier.config.environment import Environment
from kvtier.config.loader import Config
from kvtier.k8s.base import chart_app
from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.charts import curvine_charts
from kvtier.k8s.curvine.policies import FENCE_PREFIX, curvine_policies, fence_args, pod_ranges
from kvtier.k8s.curvine.scripts import l2_fence
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR
from tests.validation import validate_k8s


@pytest.fixture(scope="module", params=["dev", "prod"])
def config(request: pytest.FixtureRequest) -> Config:
    return load_checked(CONFIG_DIR, request.param)


def admitted_ip_blocks(manifests: list[dict[str, Any]], namespace: str) -> list[tuple[str, str]]:
    """(policy, cidr) of every ipBlock an ingress rule of a NetworkPolicy in `namespace` admits."""
    found = []
    for obj in manifests:
        if obj.get("kind") != "NetworkPolicy" or obj["metadata"].get("namespace") != namespace:
            continue
        for rule in obj["spec"].get("ingress", []) or []:
            for peer in rule.get("from", []) or []:
                if "ipBlock" in peer:
                    found.append((obj["metadata"]["name"], peer["ipBlock"]["cidr"]))
    return found


def overlaps(blocks: list[tuple[str, str]], env: Environment) -> list[str]:
    ranges = [ipaddress.ip_network(r) for r in pod_ranges(env)]
    return [
        f"{policy}: {cidr} overlaps the pod range {r}"
        for policy, cidr in blocks
        for r in ranges
        if ipaddress.ip_network(cidr).overlaps(r)
    ]


def test_no_ip_block_admitted_to_curvine_covers_a_pod_address(config: Config) -> None:
    manifests = [o for chart in curvine_charts(chart_app(), config.env) for o in chart.manifests()]
    assert overlaps(admitted_ip_blocks(manifests, names.NAMESPACE), config.env) == []
    # The check sees one: a policy admitting the node subnets (what a naive FUSE rule would be) is refused.
    subnet = {
        "kind": "NetworkPolicy",
        "metadata": {"name": "naive-fuse", "namespace": names.NAMESPACE},
        "spec": {"ingress": [{"from": [{"ipBlock": {"cidr": config.env.network.cidr}}]}]},
    }
    assert overlaps(admitted_ip_blocks([subnet], names.NAMESPACE), config.env) == [
        f"naive-fuse: {config.env.network.cidr} overlaps the pod range {config.env.network.cidr}"
    ]


def test_existing_clusters_count_every_private_range() -> None:
    env = load_checked(CONFIG_DIR, "byoc").env
    assert env.hyperpod.existing is not None
    assert set(pod_ranges(env)) >= {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"}


def test_curvine_policies_validate_and_default_deny() -> None:
    policies = curvine_policies()
    for policy in policies:
        validate_k8s(policy)
    assert policies[0]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}
    journal = [r for p in policies for r in p["spec"]["ingress"] if {"protocol": "TCP", "port": 8996} in r["ports"]]
    (only,) = journal
    assert only["from"][0]["podSelector"]["matchExpressions"][0]["values"] == ["master"]


def _node(name: str, ip: str | None, uid: str = "u1") -> dict[str, Any]:
    addresses = [{"type": "Hostname", "address": name}]
    if ip:
        addresses.insert(0, {"type": "InternalIP", "address": ip})
    return {"metadata": {"name": name, "uid": uid}, "status": {"addresses": addresses}}


TARGETS = l2_fence.parse_targets(["app.kubernetes.io/component=master:8995", "app.kubernetes.io/component=worker:8997"])


def test_fence_admits_each_node_address_as_a_32_owned_by_its_node() -> None:
    wanted, refused = l2_fence.desired(
        [_node("gpu-a", "10.0.3.7", "uid-a"), _node("gpu-b", None)], set(), "curvine", FENCE_PREFIX, TARGETS
    )
    assert refused == ["node gpu-b: no IPv4 InternalIP; its FUSE pod is not admitted"]
    policy = wanted["l2-fence-gpu-a"]
    validate_k8s(policy)
    assert policy["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-a", "uid": "uid-a"}
    ]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.0.3.7/32"}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8995}, {"protocol": "TCP", "port": 8997}]
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["values"] == ["master", "worker"]


def test_fence_never_admits_an_address_a_pod_holds() -> None:
    """An address reused after its node went away (a pod got it) is left out, whatever the Node object says."""
    wanted, refused = l2_fence.desired([_node("gpu-a", "10.0.3.7")], {"10.0.3.7"}, "curvine", FENCE_PREFIX, TARGETS)
    assert wanted == {}
    assert refused == ["node gpu-a: 10.0.3.7 is a pod's address (not host network); not admitted"]


def test_fence_plan_replaces_changed_and_removes_gone() -> None:
    wanted, _ = l2_fence.desired(
        [_node("gpu-a", "10.0.3.8"), _node("gpu-c", "10.0.3.9")], set(), "curvine", FENCE_PREFIX, TARGETS
    )
    old, _ = l2_fence.desired(
        [_node("gpu-a", "10.0.3.7"), _node("gpu-b", "10.0.3.1")], set(), "curvine", FENCE_PREFIX, TARGETS
    )
    delete, create = l2_fence.plan(list(old.values()), wanted)
    assert delete == ["l2-fence-gpu-a", "l2-fence-gpu-b"]
    assert [p["metadata"]["name"] for p in create] == ["l2-fence-gpu-a", "l2-fence-gpu-c"]
    assert l2_fence.plan(list(wanted.values()), wanted) == ([], [])


class _FakeKube(l2_fence.Kube):
    """The fence's API calls against dicts: nodes, pods by podIP, the fence's policies."""

    def __init__(self, nodes: list[dict[str, Any]], pods: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__("http://127.0.0.1:1", None, None)
        self.nodes, self.pods = nodes, pods
        self.policies: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(f"{method} {path.split('?', maxsplit=1)[0]}")
        if path.startswith("/api/v1/nodes"):
            return {"items": self.nodes}
        if path.startswith("/api/v1/namespaces/curvine/pods"):  # the workers: one per node given, plus a stray node
            return {"items": [{"spec": {"nodeName": n["metadata"]["name"]}} for n in self.nodes[:2]]}
        if path.startswith("/api/v1/pods"):
            return {"items": self.pods.get(path.rsplit("%3D", 1)[-1], [])}
        if method == "GET":
            return {"items": list(self.policies.values())}
        if method == "POST":
            assert body is not None
            self.policies[body["metadata"]["name"]] = body
        if method == "DELETE":
            del self.policies[path.rsplit("/", 1)[-1]]
        return {}


def test_fence_reconciles_against_the_api() -> None:
    kube = _FakeKube(
        [_node("gpu-a", "10.0.3.7"), _node("gpu-b", "10.0.3.8"), _node("system-a", "10.0.3.20")],
        {"10.0.3.8": [{"spec": {}}], "10.0.3.7": [{"spec": {"hostNetwork": True}}]},
    )
    args = argparse.Namespace(
        namespace="curvine", worker_selector="app.kubernetes.io/component=worker", prefix=FENCE_PREFIX
    )
    lines = l2_fence.reconcile(kube, args, TARGETS)
    assert lines == [
        "node gpu-b: 10.0.3.8 is a pod's address (not host network); not admitted",
        "created l2-fence-gpu-a (10.0.3.7)",
    ]
    assert set(kube.policies) == {"l2-fence-gpu-a"}  # no worker on system-a: not fenced in
    assert l2_fence.reconcile(kube, args, TARGETS) == [
        "node gpu-b: 10.0.3.8 is a pod's address (not host network); not admitted"
    ]


def test_fence_args_name_the_workers_and_rpc_ports() -> None:
    rendered = fence_args()
    assert "--target=app.kubernetes.io/component=master:8995" in rendered
    assert "--target=app.kubernetes.io/component=worker:8997" in rendered
    assert "--worker-selector=app.kubernetes.io/component=worker,app.kubernetes.io/name=curvine" in rendered


def test_fence_probes_read_its_heartbeat(config: Config) -> None:
    """Ready after a pass that succeeded, restarted after five minutes without one; the file is in a memory emptyDir."""
    (chart,) = [c for c in curvine_charts(chart_app(), config.env) if c.node.id == "curvine-policies"]
    (deployment,) = [o for o in chart.manifests() if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--heartbeat=/run/fence/heartbeat" in container["args"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert "/run/fence/heartbeat" in container[probe]["exec"]["command"][-1]
    assert {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in pod["volumes"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_fence_main_runs_one_pass_over_http(tmp_path: Path) -> None:
    """The script as shipped, one pass (`--once`) against a recorded API on 127.0.0.1: the requests it makes, the
    policy it posts and the heartbeat it touches."""
    seen: list[str] = []
    posted: list[dict[str, Any]] = []

    class Api(BaseHTTPRequestHandler):
        def _send(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            seen.append(f"GET {self.path}")
            url = urlparse(self.path)
            query = parse_qs(url.query)
            if url.path == "/api/v1/namespaces/curvine/pods":
                self._send({"items": [{"spec": {"nodeName": "gpu-a"}}]})
            elif url.path == "/api/v1/nodes":
                self._send({"items": [_node("gpu-a", "10.0.3.7", "uid-a"), _node("system-a", "10.0.1.4")]})
            elif url.path == "/api/v1/pods":
                assert query == {"fieldSelector": ["status.podIP=10.0.3.7"]}
                self._send({"items": [{"spec": {"hostNetwork": True}}]})
            else:
                assert query == {"labelSelector": ["kvtier.io/l2-fence=true"]}
                self._send({"items": []})

        def do_POST(self) -> None:
            seen.append(f"POST {self.path}")
            posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self._send({})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    heartbeat = tmp_path / "heartbeat"
    try:
        code = l2_fence.main(
            [f"--api=http://127.0.0.1:{server.server_address[1]}", "--once", f"--heartbeat={heartbeat}"]
            + [a for a in fence_args() if not a.startswith("--heartbeat")]
        )
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert code == 0 and heartbeat.exists()
    assert [s.split("?")[0] for s in seen] == [
        "GET /api/v1/namespaces/curvine/pods",
        "GET /api/v1/nodes",
        "GET /api/v1/pods",
        "GET /apis/networking.k8s.io/v1/namespaces/curvine/networkpolicies",
        "POST /apis/networking.k8s.io/v1/namespaces/curvine/networkpolicies",
    ]
    (policy,) = posted
    assert policy["metadata"]["name"] == "l2-fence-gpu-a"
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.3.7/32"}}]
