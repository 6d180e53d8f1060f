"""Voluntary disruptions against kvtier's rendered PodDisruptionBudgets (issue 38), on the recorded API with the API
server's eviction rules (tests/ops/fake_cluster.py): the healer's eviction dry run, a node drain (`kubectl drain`
evicts every pod and retries a 429) and the FUSE roll, on a one-replica endpoint and on a two-replica one.

The budget of a one-replica endpoint is kvtier's `maxUnavailable: 1`: it lets the eviction through, so the healer,
the drain and the roll finish (the endpoint is down until its replacement is Ready; `validate` warns). The obvious
alternative, `minAvailable: 1`, is shown to block all three for ever."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.k8s.curvine.scripts.l2_healer import Kube
from kvtier.k8s.disruption import engine_pdb
from kvtier.k8s.endpoint_names import engine_labels
from kvtier.ops.fuse_roll import Bounds, Cluster, Roller, RollError
from kvtier.rules import load_checked
from tests.ops.fake_cluster import FakeCluster, fake_cluster
from tests.ops.test_network_bounds import _kubeconfig
from tests.support import CONFIG_DIR

OLD = "ghcr.io/curvineio/curvine-csi:v0.4.0"
DRAIN_S = 10.0  # the tests' drain timeout (kubectl drain --timeout)


@pytest.fixture(scope="module")
def dev() -> Config:
    return load_checked(CONFIG_DIR, "dev")


def _endpoint(dev: Config, name: str, replicas: int) -> Endpoint:
    base = dev.lob("retail").endpoints[0]
    return base.model_copy(update={"name": name, "mode": "standalone", "replicas": replicas})


def _min_available(budget: dict[str, Any]) -> dict[str, Any]:
    """The budget with `minAvailable: 1` instead of kvtier's `maxUnavailable: 1`."""
    spec = {k: v for k, v in budget["spec"].items() if k != "maxUnavailable"}
    return {**budget, "spec": {**spec, "minAvailable": 1}}


def populate(fake: FakeCluster, dev: Config) -> None:
    """Three GPU nodes; `solo` runs one replica on gpu-a, `pair` one on gpu-a and one on gpu-b; kvtier's budgets."""
    for node in ("gpu-a", "gpu-b", "gpu-c"):
        fake.node(node)
        fake.plugin(node, dev.env.curvine.images.csi)
        fake.fuse_pod(node, dev.env.curvine.images.csi)
    fake.healer_running = False  # each test says when it runs
    fake.deployment("kvtier-retail", "solo", 1, engine_labels("solo"), ["gpu-a"])
    fake.deployment("kvtier-retail", "pair", 2, engine_labels("pair"), ["gpu-a", "gpu-b"])
    fake.pdbs = [engine_pdb("retail", _endpoint(dev, "solo", 1)), engine_pdb("retail", _endpoint(dev, "pair", 2))]


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def point(fake: FakeCluster) -> None:
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", fake.url, {"token": "t"})))

    return point


@pytest.fixture
def cluster(dev: Config, kubeconfig: Any) -> Iterator[FakeCluster]:
    with fake_cluster() as fake:
        populate(fake, dev)
        kubeconfig(fake)
        yield fake


@pytest.fixture
def paused(dev: Config, kubeconfig: Any) -> Iterator[FakeCluster]:
    """The same cluster, its controllers moved only by `tick()`: what happens between two API calls is the test's."""
    with fake_cluster(run=False) as fake:
        populate(fake, dev)
        kubeconfig(fake)
        yield fake


def _pod(fake: FakeCluster, prefix: str, node: str) -> dict[str, Any]:
    with fake.lock:
        return next(
            p
            for p in fake.pods_of(node, "kvtier-retail")
            if p["metadata"]["name"].startswith(prefix) and "deletionTimestamp" not in p["metadata"]
        )


def test_the_one_replica_budget_lets_the_healer_through_and_min_available_would_not(paused: FakeCluster) -> None:
    """The healer's own calls (l2_healer.Kube.evict_pod: an Eviction dry run, then a delete by uid)."""
    pod = _pod(paused, "solo-", "gpu-a")
    kube = Kube(paused.url, None, None, timeout_s=5)
    kvtier_budgets = list(paused.pdbs)
    paused.pdbs = [_min_available(b) if b["metadata"]["name"] == "solo-engine" else b for b in kvtier_budgets]
    with pytest.raises(urllib.error.HTTPError) as refused:
        kube.evict_pod("kvtier-retail", pod["metadata"]["name"], pod["metadata"]["uid"])
    assert refused.value.code == 429 and "deletionTimestamp" not in pod["metadata"]
    paused.pdbs = kvtier_budgets
    kube.evict_pod("kvtier-retail", pod["metadata"]["name"], pod["metadata"]["uid"])
    assert paused.events[-2:] == ["dry-run evict kvtier-retail/solo-0", "delete kvtier-retail/solo-0"]


def drain(fake: FakeCluster, node: str, timeout_s: float = DRAIN_S) -> list[str]:
    """`kubectl drain`: cordon, then evict every LOB pod on the node through the Eviction API, retrying a 429 until
    `timeout_s`; returns the pods it could not evict."""
    from kubernetes import client

    from kvtier.ops.kube import api_client

    core = client.CoreV1Api(api_client())
    core.patch_node(node, {"spec": {"unschedulable": True}}, _content_type="application/merge-patch+json")
    left = [
        p["metadata"]["name"] for p in fake.pods_of(node, "kvtier-retail") if "deletionTimestamp" not in p["metadata"]
    ]
    deadline = time.monotonic() + timeout_s
    while left:
        for name in list(left):
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": "kvtier-retail"},
            }
            try:
                core.create_namespaced_pod_eviction(name, "kvtier-retail", body, _preload_content=False)
                left.remove(name)
            except client.ApiException as err:
                if err.status != 429:
                    raise
        if time.monotonic() >= deadline:
            return left
        time.sleep(0.05)
    return left


def test_a_drain_evicts_a_one_replica_endpoint_and_never_both_replicas_of_two(paused: FakeCluster) -> None:
    assert drain(paused, "gpu-a") == []  # solo's only replica, and one of pair's
    assert not [e for e in paused.events if e.startswith("refuse eviction")]
    # Draining gpu-b before pair's replacement is Ready (HyperPod patching two nodes at once): the budget keeps pair's
    # last replica serving.
    assert drain(paused, "gpu-b", timeout_s=0.0) == ["pair-1"]
    assert paused.events[-1] == "refuse eviction kvtier-retail/pair-1 (pair-engine)"
    for _ in range(20):  # the replacement starts on gpu-c, the only schedulable node, and becomes Ready
        paused.tick()
    assert drain(paused, "gpu-b") == [], "once the replacement is Ready, the drain goes on"
    live = [
        p
        for p in paused.pods.values()
        if p["metadata"]["name"].startswith("pair-") and "deletionTimestamp" not in p["metadata"]
    ]
    assert [p["spec"]["nodeName"] for p in live] == ["gpu-c"], live


def test_with_min_available_a_drain_of_a_one_replica_endpoint_never_finishes(cluster: FakeCluster) -> None:
    cluster.pdbs = [_min_available(b) if b["metadata"]["name"] == "solo-engine" else b for b in cluster.pdbs]
    left = drain(cluster, "gpu-a", timeout_s=1.0)
    assert left == [_pod(cluster, "solo-", "gpu-a")["metadata"]["name"]]


def _roller(dev: Config, **bounds: Any) -> Roller:
    from kubernetes import client

    from kvtier.ops.kube import api_client

    return Roller(dev.env, Cluster(dev.env, client.CoreV1Api(api_client())), Bounds(**bounds), say=lambda _: None)


@pytest.mark.parametrize("budget", ["kvtier", "min_available"])
def test_the_fuse_roll_finishes_on_a_one_replica_endpoint_only_with_kvtiers_budget(
    cluster: FakeCluster, dev: Config, budget: str
) -> None:
    for node in ("gpu-a", "gpu-b", "gpu-c"):  # the FUSE pods run the old client
        cluster.pods[("curvine", f"curvine-csi-standalone-{node}")]["spec"]["containers"][0]["image"] = OLD
    if budget == "min_available":
        cluster.pdbs = [_min_available(b) if b["metadata"]["name"] == "solo-engine" else b for b in cluster.pdbs]
    cluster.healer_running = True
    roll = _roller(dev, heal_s=3.0, poll_s=0.2)
    if budget == "kvtier":
        roll.roll("gpu-a", resume=False)
        assert "healer restarts kvtier-retail/solo-0" in cluster.events, cluster.events
        assert not cluster.nodes["gpu-a"]["spec"].get("unschedulable")
        return
    with pytest.raises(
        RollError, match="node gpu-a stays cordoned: the L2 healer has not restarted kvtier-retail/solo-0"
    ):
        roll.roll("gpu-a", resume=False)
    assert any(e.startswith("refuse eviction kvtier-retail/solo-0") for e in cluster.events)
