"""`kvtier l2 roll-fuse` and the FUSE fleet in `kvtier status`, against a recorded Kubernetes API with the controllers
the roll meets (tests/ops/fake_cluster.py): kvtier's own client, the healer's real API calls, kvtier's rendered
PodDisruptionBudgets. A run that finishes, a dry run, an interrupted run resumed, and the bad inputs (a cluster that
does not answer, a node that never becomes Ready, a FUSE pod that never answers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtier.cli import main as cli
from kvtier.config.loader import Config
from kvtier.k8s.curvine.fuse_check import check_pod, pod_name
from kvtier.k8s.disruption import engine_pdb
from kvtier.k8s.endpoint_names import engine_labels
from kvtier.ops.fuse import fleet_checks, read_fleet
from kvtier.ops.fuse_roll import ROLL_ANNOTATION, Bounds, Cluster, Roller, heal_bound, plan
from kvtier.rules import load_checked
from tests.ops.fake_cluster import FakeCluster, fake_cluster
from tests.ops.test_network_bounds import _kubeconfig, silent_server
from tests.support import CONFIG_DIR, ROOT

OLD = "ghcr.io/curvineio/curvine-csi:v0.4.0"
NODES = ("gpu-a", "gpu-b")
BOUND_S = 30.0


@pytest.fixture(scope="module")
def dev() -> Config:
    return load_checked(CONFIG_DIR, "dev")


@pytest.fixture
def cluster(dev: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """Two GPU nodes on the old FUSE client, their node plugins already on the new one; retail's endpoint with a
    replica on each node, support's (autoscaled down to one) on gpu-a; kvtier's budgets for both."""
    target = dev.env.curvine.images.csi
    with fake_cluster() as fake:
        for node in NODES:
            fake.node(node)
            fake.plugin(node, target)
            fake.fuse_pod(node, OLD)
        retail = dev.lob("retail").endpoints[0].model_copy(update={"mode": "standalone"})
        support = retail.model_copy(update={"name": "llama31-8b", "replicas": 1})
        fake.deployment("kvtier-retail", retail.name, 2, engine_labels(retail.name), list(NODES))
        fake.deployment("kvtier-support", support.name, 1, engine_labels(support.name), ["gpu-a"])
        fake.pdbs = [engine_pdb("retail", retail), engine_pdb("support", support)]
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", fake.url, {"token": "t"})))
        yield fake


def roller(dev: Config, **bounds: Any) -> Roller:
    from kubernetes import client

    from kvtier.ops.kube import api_client

    return Roller(dev.env, Cluster(dev.env, client.CoreV1Api(api_client())), Bounds(**bounds), say=lambda _: None)


def _roll_cli(*extra: str) -> list[str]:
    return ["l2", "roll-fuse", "-e", "dev", "--config-dir", str(CONFIG_DIR), *extra]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("contacting ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _settled(fake: FakeCluster, dev: Config) -> None:
    """Every node on the new client, uncordoned, unmarked; every endpoint at its replicas, none left on an old mount."""
    for node in NODES:
        body = fake.nodes[node]
        assert not body["spec"].get("unschedulable") and ROLL_ANNOTATION not in body["metadata"]["annotations"], body
        fuse = fake.fuse_of(node)
        assert fuse is not None and fuse["spec"]["containers"][0]["image"] == dev.env.curvine.images.csi
        check = fake.pods.get(("curvine", pod_name(node)))
        assert check is None or "deletionTimestamp" in check["metadata"], "the check pod is removed"
    for deployment in fake.deployments:
        live = [
            p
            for p in fake.pods.values()
            if p["metadata"]["labels"] == deployment.labels and not p["metadata"].get("deletionTimestamp")
        ]
        assert len(live) == deployment.replicas, (deployment, live)


def test_the_roll_goes_node_by_node_and_the_healer_restarts_every_l2_pod(
    cluster: FakeCluster, dev: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(_roll_cli()) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "gpu-a: v0.4.0" not in out  # the plan prints the images as they are
    assert f"gpu-a: {OLD} -> {dev.env.curvine.images.csi}: roll" in out
    _settled(cluster, dev)
    events = cluster.events
    for node in NODES:
        cordon, uncordon = events.index(f"cordon {node}"), events.index(f"uncordon {node}")
        old_fuse = f"delete curvine/curvine-csi-standalone-{node}"
        check = f"check succeeds {node}"
        restarts = [i for i, e in enumerate(events) if e.startswith("healer restarts") and cordon < i < uncordon]
        assert cordon < events.index(old_fuse) < events.index(check) < uncordon, events
        started = next(i for i, e in enumerate(events) if e.startswith(f"csi starts FUSE {node} "))
        assert restarts and all(started < i for i in restarts), "the healer restarts pods once the new FUSE is up"
    assert events.index("uncordon gpu-a") < events.index("cordon gpu-b"), "one node at a time"
    # Every L2 pod was restarted by the healer (dry-run eviction first), the one-replica endpoint's included: its
    # budget (maxUnavailable 1) let the eviction through.
    assert "dry-run evict kvtier-support/llama31-8b-0" in events
    assert "healer restarts kvtier-support/llama31-8b-0" in events
    # gpu-a's retail replica restarts on gpu-b (gpu-a is cordoned), which rolls next: that one restarts again.
    assert cluster.count("healer restarts kvtier-retail/") == 3
    assert cluster.count("refuse eviction") == 0


def test_json_holds_only_the_result(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(_roll_cli("--json")) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["rolled"] == list(NODES)
    assert "gpu-a: cordoned" in captured.err


def test_a_dry_run_prints_the_plan_and_changes_nothing(
    cluster: FakeCluster, dev: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(_roll_cli("--dry-run")) == 0
    out = capsys.readouterr().out
    assert "FUSE client" in out and "roll 2" in out and "dry run: nothing changed" in out
    assert "gpu-a: " in out and "(2 L2 pod(s) to restart)" in out  # retail's and support's replicas on gpu-a
    assert not [e for e in cluster.events if not e.startswith(("schedule", "gone"))], cluster.events
    assert cli(_roll_cli("--dry-run", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == dev.env.curvine.images.csi and [n["action"] for n in data["nodes"]] == ["roll", "roll"]


def test_status_shows_each_nodes_client_and_flags_a_mixed_fleet(cluster: FakeCluster, dev: Config) -> None:
    from kubernetes import client

    from kvtier.ops.kube import api_client

    core = client.CoreV1Api(api_client())
    before = {c.name: c for c in fleet_checks(dev.env, read_fleet(dev.env, core))}
    assert before["gpu-a"].value == OLD and before["gpu-a"].verdict == "degraded"
    assert before["fleet"].verdict == "ok", "one version everywhere, if an old one: the nodes say so"
    roller(dev, poll_s=0.2).roll("gpu-a", resume=False)
    mixed = {c.name: c for c in fleet_checks(dev.env, read_fleet(dev.env, core))}
    assert mixed["gpu-a"].verdict == "ok" and mixed["gpu-b"].verdict == "degraded"
    assert mixed["fleet"].verdict == "degraded" and "mixed FUSE client versions" in mixed["fleet"].detail
    assert f"{OLD} on 1 node(s)" in mixed["fleet"].value and "kvtier l2 roll-fuse -e dev" in mixed["fleet"].detail


def test_an_interrupted_run_is_resumed_from_the_cluster(
    cluster: FakeCluster, dev: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL in the middle of gpu-a (its new FUSE pod is being started): nothing local survives; the next run finds
    gpu-a marked and cordoned, finishes it first, then rolls gpu-b, and replaces each FUSE pod once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtier", *_roll_cli()],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while "csi starts FUSE gpu-a " + dev.env.curvine.images.csi not in cluster.events:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, cluster.events
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert cluster.nodes["gpu-a"]["metadata"]["annotations"][ROLL_ANNOTATION] == dev.env.curvine.images.csi
    assert cluster.nodes["gpu-a"]["spec"]["unschedulable"] is True
    assert cli(_roll_cli()) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "gpu-a: " in out and ": resume: cordoned by an earlier run" in out
    assert out.index("gpu-a: resuming") < out.index("gpu-b: rolling")
    _settled(cluster, dev)
    for node in NODES:
        assert cluster.count(f"delete curvine/curvine-csi-standalone-{node}") == 1
        assert cluster.count(f"csi starts FUSE {node}") == 1


def test_a_cluster_that_does_not_answer_is_one_line_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with silent_server() as address:
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", f"http://{address}", {"token": "t"})))
        start = time.monotonic()
        code = cli(_roll_cli())
        elapsed = time.monotonic() - start
    assert code == 3 and elapsed < BOUND_S
    assert "does not answer within 4 s to connect" in _one_line(capsys.readouterr().err)


def test_a_node_that_never_becomes_ready_is_left_as_it_was(
    cluster: FakeCluster, dev: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.nodes["gpu-b"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    start = time.monotonic()
    assert cli(_roll_cli("--node-ready-timeout", "1")) == 1
    assert time.monotonic() - start < BOUND_S
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("kvtier l2: node gpu-b is unchanged (not cordoned): it is not Ready after 1 s"), line
    assert "run `kvtier l2 roll-fuse -e dev` again" in line
    assert not cluster.nodes["gpu-b"]["spec"].get("unschedulable")
    assert cluster.fuse_of("gpu-a")["spec"]["containers"][0]["image"] == dev.env.curvine.images.csi  # type: ignore[index]


def test_a_node_cordoned_by_an_earlier_run_that_is_not_ready_stays_cordoned_and_says_so(
    cluster: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.nodes["gpu-a"]["spec"]["unschedulable"] = True
    cluster.nodes["gpu-a"]["metadata"]["annotations"][ROLL_ANNOTATION] = "x"
    cluster.nodes["gpu-a"]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert cli(_roll_cli("--node-ready-timeout", "1")) == 1
    line = _one_line(capsys.readouterr().err)
    assert "node gpu-a stays cordoned: it is not Ready after 1 s" in line and "kubectl uncordon gpu-a" in line


def test_a_fuse_pod_that_never_answers_leaves_the_node_cordoned_with_the_way_out(
    cluster: FakeCluster, dev: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.fuse_never_answers.add("gpu-a")
    start = time.monotonic()
    assert cli(_roll_cli("--fuse-timeout", "2")) == 1
    assert time.monotonic() - start < BOUND_S
    line = _one_line(capsys.readouterr().err)
    assert "node gpu-a stays cordoned: the new FUSE client did not answer within 2 s" in line, line
    assert f"kubectl -n curvine describe pod {pod_name('gpu-a')}" in line and "kubectl uncordon gpu-a" in line
    assert cluster.nodes["gpu-a"]["spec"]["unschedulable"] is True
    assert "cordon gpu-b" not in cluster.events, "the run stops at the node that did not finish"
    cluster.fuse_never_answers.clear()  # fixed: the next run finishes it
    assert cli(_roll_cli()) == 0
    _settled(cluster, dev)


def test_a_node_whose_plugin_is_not_upgraded_is_not_touched(
    cluster: FakeCluster, dev: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.plugin("gpu-b", OLD)  # the platform stack has not rolled the CSI DaemonSet there yet
    assert cli(_roll_cli()) == 1
    assert (
        "1 node(s) not rolled, first gpu-b: its CSI node plugin builds FUSE pods from " + OLD in capsys.readouterr().err
    )
    assert "cordon gpu-b" not in cluster.events and cluster.fuse_of("gpu-b")["spec"]["containers"][0]["image"] == OLD  # type: ignore[index]


def test_the_check_pod_is_bound_to_the_node_and_mounts_the_check_claim(dev: Config) -> None:
    from tests.validation import validate_k8s

    pod = check_pod(dev.env, "hyperpod-i-0123456789abcdef0")
    validate_k8s(pod)
    spec = pod["spec"]
    assert spec["nodeName"] == "hyperpod-i-0123456789abcdef0" and spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [{"operator": "Exists"}] and spec["activeDeadlineSeconds"] > 0
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == "kvtier-fuse-check"
    assert len(pod["metadata"]["name"]) <= 63


def test_the_healer_bound_follows_its_pace() -> None:
    def pod(owner: str) -> dict[str, Any]:
        return {
            "metadata": {
                "namespace": "n",
                "name": "p",
                "ownerReferences": [{"controller": True, "kind": "ReplicaSet", "name": owner}],
            }
        }

    assert heal_bound([pod("a")]) == 2 * 15 + 60
    assert heal_bound([pod("a"), pod("a"), pod("b")]) == 2 * 15 + 300 + 60


def test_the_plan_puts_earlier_nodes_first(dev: Config) -> None:
    from kvtier.ops.fuse import fleet

    def node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": {}, "status": {}}

    fuse = [
        {
            "metadata": {"name": f"f-{n}"},
            "spec": {"nodeName": n, "containers": [{"name": "curvine-fuse", "image": OLD}]},
        }
        for n in ("a", "z")
    ]
    plugins = [
        {
            "metadata": {"name": f"p-{n}"},
            "spec": {"nodeName": n, "containers": [{"name": "csi-plugin", "image": dev.env.curvine.images.csi}]},
        }
        for n in ("a", "z")
    ]
    planned = plan(dev.env, fleet([node("a"), node("z", {ROLL_ANNOTATION: "x"}), node("m")], fuse, plugins))
    assert [(n.node, n.action) for n in planned.nodes] == [("z", "resume"), ("a", "roll"), ("m", "none")]


def test_status_reads_the_fleet_through_the_kubeconfig_and_says_when_it_cannot(
    cluster: FakeCluster, dev: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvtier.cli.status import fuse_checks

    checks = {c.name: c for c in fuse_checks(dev.env, None)}
    assert set(checks) == {"gpu-a", "gpu-b", "fleet"} and checks["gpu-a"].verdict == "degraded"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    (unreadable,) = fuse_checks(dev.env, None)
    assert unreadable.verdict == "unknown" and "no usable kubeconfig" in unreadable.detail


def test_a_node_someone_else_cordoned_is_rolled_and_left_cordoned(cluster: FakeCluster, dev: Config) -> None:
    cluster.nodes["gpu-b"]["spec"]["unschedulable"] = True  # an admin's maintenance cordon
    assert cli(_roll_cli()) == 0
    assert cluster.nodes["gpu-b"]["spec"]["unschedulable"] is True, "kvtier uncordons only what it cordoned"
    assert not cluster.nodes["gpu-b"]["metadata"]["annotations"], cluster.nodes["gpu-b"]["metadata"]
    assert cluster.fuse_of("gpu-b")["spec"]["containers"][0]["image"] == dev.env.curvine.images.csi  # type: ignore[index]
    assert not cluster.nodes["gpu-a"]["spec"].get("unschedulable")
