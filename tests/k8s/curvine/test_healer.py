"""The L2 healer against a real kernel FUSE mount with injected faults (tests/k8s/curvine/faultfs.py), bind-mounted
into a temporary kubelet tree as curvine-csi does, and a recorded Kubernetes API on 127.0.0.1: it evicts only the
pods of truly dead mounts (ENOTCONN), never on a master outage, a slow worker or lost blocks, holds while the master
or the node's FUSE is down or too many nodes report, and one namespace it cannot list stops no other."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.k8s.curvine.scripts import HEALER, l2_healer, script_text
from kvtier.k8s.curvine.scripts.l2_healer import EXIT_NO_API, EXIT_OK, Healer, Kube, find_mounts
from tests.k8s.curvine.fake_kube import (
    HEALER_NAMESPACE,
    HEALER_SELECTOR,
    NODE,
    FakeCluster,
    fake_cluster,
    healer_pods,
    pod,
)
from tests.k8s.curvine.faultfs import FaultFS, mount

SCRIPT = Path(l2_healer.__file__)


def kubelet_volume(pods: Path, uid: str, pv: str, driver: str = "curvine") -> Path:
    """What the kubelet leaves for a CSI volume of a pod (pkg/volume/csi): vol_data.json next to `mount`."""
    volume = pods / uid / "volumes" / "kubernetes.io~csi" / pv
    volume.mkdir(parents=True)
    (volume / "vol_data.json").write_text(json.dumps({"driverName": driver, "specVolID": pv, "volumeHandle": "h"}))
    return volume / "mount"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with fake_cluster() as c:
        yield c


@pytest.fixture
def fuse(tmp_path: Path) -> Iterator[FaultFS]:
    with mount(tmp_path / "fuse") as fs:
        (fs.path / "retail").mkdir()
        yield fs


def healer(cluster: FakeCluster, pods_dir: Path, token: Path | None = None, **kwargs: Any) -> Healer:
    kube = Kube(cluster.url, str(token) if token else None, None, timeout_s=10)
    options: dict[str, Any] = {
        "dead_checks": 1,
        "healer_namespace": HEALER_NAMESPACE,
        "healer_selector": HEALER_SELECTOR,
    }
    options.update(kwargs)
    return Healer(
        kube,
        NODE,
        ["kvtier-retail", "kvtier-search"],
        "l2-cache",
        str(pods_dir),
        "curvine",
        1.0,
        [cluster.master_url],
        cluster.fuse_health_url,
        health_timeout_s=2.0,
        **options,
    )


def two_l2_pods(pods: Path, fs: FaultFS, cluster: FakeCluster) -> None:
    """Two engines of one LOB on this node, each with a bind mount of the node's FUSE mount."""
    fs.bind(kubelet_volume(pods, "uid-a", "kvtier-dev-retail-l2"))
    fs.bind(kubelet_volume(pods, "uid-b", "kvtier-dev-retail-l2"))
    cluster.pods = [
        pod("kvtier-retail", "engine-a", "uid-a", owner="engine-a-rs"),
        pod("kvtier-retail", "engine-b", "uid-b", owner="engine-b-rs"),
        *healer_pods(total=4, reporting=1),
    ]


def test_finds_only_the_curvine_volumes_of_pods(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    kubelet_volume(pods, "uid-1", "kvtier-dev-retail-l2").mkdir()
    kubelet_volume(pods, "uid-2", "pvc-ebs", driver="ebs.csi.aws.com")
    (pods / "uid-3" / "volumes" / "kubernetes.io~empty-dir" / "x").mkdir(parents=True)
    broken = pods / "uid-4" / "volumes" / "kubernetes.io~csi" / "half"
    broken.mkdir(parents=True)
    (broken / "vol_data.json").write_text("{not json")  # being written: skipped, not fatal
    found = find_mounts(str(pods), "curvine")
    assert [(m.pod_uid, m.volume) for m in found] == [("uid-1", "kvtier-dev-retail-l2")]


@pytest.mark.parametrize(
    ("kind", "params", "state"),
    [
        ("master_down", {"block_s": 0.3}, "error: EIO"),
        ("master_down", {"block_s": 5}, "hung"),  # Curvine's client retrying for minutes
        ("hung", {}, "hung"),
    ],
)
def test_a_master_outage_evicts_nothing(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster, kind: str, params: dict[str, Any], state: str
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    cluster.master_up = False
    h = healer(cluster, pods)
    fuse.set_fault(kind, **params)
    for _ in range(3):
        report = h.check()
        assert report["evicted_pods"] == [] and cluster.deleted == []
        assert set(report["not_answering"].values()) == {state}
    assert not h.ready, "reported (readiness), not healed"


@pytest.mark.parametrize(("kind", "params"), [("slow", {"delay_s": 0.5}), ("lost", {"paths": ["retail/a.data"]})])
def test_a_slow_worker_or_lost_blocks_evict_nothing(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster, kind: str, params: dict[str, Any]
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    (fuse.path / "retail" / "a.data").write_bytes(b"x" * 4096)
    fuse.set_fault(kind, **params)
    h = healer(cluster, pods)
    for _ in range(3):
        assert h.check()["evicted_pods"] == []
    assert cluster.deleted == [] and h.ready, "the mounts answer: LMCache sees the read errors, not the healer"


def test_a_dead_fuse_evicts_exactly_its_pods(tmp_path: Path, fuse: FaultFS, cluster: FakeCluster) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    with mount(tmp_path / "other") as live:  # a pod of another LOB on a mount that stays alive
        live.bind(kubelet_volume(pods, "uid-live", "kvtier-dev-search-l2"))
        fuse.bind(kubelet_volume(pods, "uid-no-claim", "kvtier-dev-retail-l2"))
        fuse.bind(kubelet_volume(pods, "uid-other-ns", "kvtier-dev-x-l2"))
        fuse.bind(kubelet_volume(pods, "uid-leaving", "kvtier-dev-retail-l2"))
        cluster.pods += [
            pod("kvtier-search", "engine-live", "uid-live"),
            pod("kvtier-retail", "no-l2", "uid-no-claim", claim=None),  # a Curvine mount, not the L2 claim
            pod("kube-system", "not-ours", "uid-other-ns"),  # not a LOB namespace: never even listed
            pod("kvtier-retail", "leaving", "uid-leaving", deleting=True),
        ]
        h = healer(cluster, pods, token=token, dead_checks=2)
        fuse.kill_daemon()
        first = h.check()
        assert first["evicted_pods"] == [] and len(first["not_answering"]) == 5, "one check is not enough"
        assert set(first["not_answering"].values()) == {"dead: ENOTCONN"}
        report = h.check()
    assert sorted(report["evicted_pods"]) == ["kvtier-retail/engine-a", "kvtier-retail/engine-b"]
    assert sorted(cluster.deleted_names()) == ["kvtier-retail/engine-a", "kvtier-retail/engine-b"]
    checks = {body["metadata"]["name"]: (path, body) for path, body in cluster.evictions}
    path, body = checks["engine-a"]
    assert path.endswith("/pods/engine-a/eviction?dryRun=All"), "PodDisruptionBudgets are asked first"
    assert body["kind"] == "Eviction" and body["apiVersion"] == "policy/v1"
    assert body["deleteOptions"] == {"dryRun": ["All"], "preconditions": {"uid": "uid-a"}}
    deletes = {path.rsplit("/", 1)[1]: body for path, body in cluster.deleted}
    assert deletes["engine-a"]["preconditions"] == {"uid": "uid-a"}, "never the replacement"
    assert "kube-system" not in cluster.listed
    assert cluster.tokens == {"Bearer secret-token"}
    assert not h.ready


@pytest.mark.parametrize(("down", "reason"), [("master_up", "master_down"), ("fuse_up", "fuse_down")])
def test_a_dead_mount_is_not_healed_while_master_or_fuse_is_down(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster, down: str, reason: str
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    setattr(cluster, down, False)
    fuse.kill_daemon()
    h = healer(cluster, pods)
    report = h.check()
    assert report["held"] == reason and report["evicted_pods"] == [] and cluster.deleted == []
    assert f'kvtier_l2_healer_held{{node="{NODE}",reason="{reason}"}} 1' in h.metrics()
    setattr(cluster, down, True)
    assert len(h.check()["evicted_pods"]) == 2, "healed once both answer again"


def test_the_brake_holds_when_many_nodes_report(tmp_path: Path, fuse: FaultFS, cluster: FakeCluster) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    cluster.pods = [p for p in cluster.pods if p["metadata"]["namespace"] != HEALER_NAMESPACE]
    cluster.pods += healer_pods(total=10, reporting=4)
    fuse.kill_daemon()
    report = healer(cluster, pods).check()
    assert report["held"] == "brake" and report["healers_reporting"] == "4/10" and cluster.deleted == []


def test_rate_limited_per_endpoint(tmp_path: Path, fuse: FaultFS, cluster: FakeCluster) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    for p in cluster.pods[:2]:  # both replicas of one endpoint
        p["metadata"]["ownerReferences"][0]["name"] = "engine-rs"
    now = [1000.0]
    h = healer(cluster, pods, endpoint_interval_s=300, clock=lambda: now[0])
    fuse.kill_daemon()
    first = h.check()
    assert len(first["evicted_pods"]) == 1 and len(first["rate_limited"]) == 1
    now[0] += 299
    assert h.check()["evicted_pods"] == []
    now[0] += 2
    assert h.check()["evicted_pods"] == first["rate_limited"]


def test_one_forbidden_namespace_and_a_pdb_stop_nothing_else(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    fuse.bind(kubelet_volume(pods, "uid-s", "kvtier-dev-search-l2"))
    cluster.pods.append(pod("kvtier-search", "engine-s", "uid-s", owner="s-rs"))
    cluster.forbidden = {"kvtier-retail"}
    fuse.kill_daemon()
    h = healer(cluster, pods)
    report = h.check()
    assert report["evicted_pods"] == ["kvtier-search/engine-s"]
    assert "403" in report["namespace_errors"]["kvtier-retail"]
    cluster.forbidden, cluster.pdb_blocked = set(), {"engine-a"}
    report = h.check()
    assert report["evicted_pods"] == ["kvtier-retail/engine-b"] and report["blocked_by_pdb"] == [
        "kvtier-retail/engine-a"
    ]


def test_lob_namespaces_are_found_at_run_time(tmp_path: Path, fuse: FaultFS, cluster: FakeCluster) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    fuse.kill_daemon()
    h = healer(cluster, pods, namespace_selector="kvtier.io/line-of-business")
    h.namespaces = []  # nothing named: a LOB added after the healer started is found all the same
    assert sorted(h.check()["evicted_pods"]) == ["kvtier-retail/engine-a", "kvtier-retail/engine-b"]


def run_healer(cluster: FakeCluster, pods: Path, *extra: str) -> subprocess.Popen[str]:
    args = [
        f"--node={NODE}",
        "--namespace=kvtier-retail",
        f"--pods-dir={pods}",
        f"--api-url={cluster.url}",
        f"--master-url={cluster.master_url}",
        f"--fuse-health-url={cluster.fuse_health_url}",
        f"--healer-namespace={HEALER_NAMESPACE}",
        f"--healer-selector={HEALER_SELECTOR}",
        "--token-file=",
        *extra,
    ]
    # The shipped script as the DaemonSet runs it: its own process, standard library only.
    return subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=subprocess.PIPE, text=True)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except urllib.error.URLError as err:  # not listening yet
        return 0, str(err)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_healer_process_through_a_master_outage_and_a_fuse_death(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    port = free_port()
    process = run_healer(
        cluster, pods, "--interval-seconds=0.5", "--stat-timeout-seconds=0.5", "--dead-checks=2",
        f"--health-port={port}", "--health-host=127.0.0.1",
    )  # fmt: skip
    try:
        fuse.set_fault("master_down", block_s=3)
        cluster.master_up = False
        deadline = time.monotonic() + 20
        while get(f"http://127.0.0.1:{port}/readyz")[0] != 503:
            assert time.monotonic() < deadline, "the outage shows in /readyz"
            time.sleep(0.2)
        time.sleep(4)  # eight checks of a hung, then failing, mount
        assert cluster.deleted == [], "a master outage restarts nothing"
        fuse.set_fault("none")
        cluster.master_up = True
        fuse.kill_daemon()
        while len(cluster.deleted) < 2:
            assert time.monotonic() < deadline + 10, "a dead FUSE is healed"
            time.sleep(0.2)
        time.sleep(1.5)
        assert sorted(cluster.deleted_names()) == ["kvtier-retail/engine-a", "kvtier-retail/engine-b"], "once each"
        families = {f.name: f for f in text_string_to_metric_families(get(f"http://127.0.0.1:{port}/metrics")[1])}
        assert families["kvtier_l2_healer_evictions"].samples[0].value == 2
        assert {s.labels["state"]: s.value for s in families["kvtier_l2_healer_mounts"].samples}["dead"] == 2
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_once_on_a_healthy_node_exits_0(tmp_path: Path, cluster: FakeCluster) -> None:
    process = run_healer(cluster, tmp_path, "--once")
    out, _ = process.communicate(timeout=30)
    assert process.returncode == EXIT_OK and json.loads(out)["mounts"] == 0


def test_an_unreachable_api_evicts_nothing_and_exits_3(
    tmp_path: Path, fuse: FaultFS, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = tmp_path / "pods"
    fuse.bind(kubelet_volume(pods, "uid-dead", "kvtier-dev-retail-l2"))
    fuse.kill_daemon()
    with fake_cluster() as health:  # master and FUSE answer; the API does not
        args = l2_healer.parse_args(
            [f"--node={NODE}", "--namespace=kvtier-retail", f"--pods-dir={pods}", "--api-url=http://127.0.0.1:9",
             f"--master-url={health.master_url}", f"--fuse-health-url={health.fuse_health_url}",
             "--dead-checks=1", "--once"]
        )  # fmt: skip
        assert l2_healer.run(args) == EXIT_NO_API
    assert "kvtier-retail" in json.loads(capsys.readouterr().out)["namespace_errors"]


@pytest.mark.parametrize(
    "bad",
    [
        ["--interval-seconds=0"],
        ["--dead-checks=0"],
        ["--brake-share=1.5"],
        ["--health-port=70000"],
        ["--master-url="],
    ],
)
def test_arguments_out_of_range_exit_2_with_one_line(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    base = [f"--node={NODE}", "--api-url=http://127.0.0.1:9", "--master-url=http://m", "--fuse-health-url=http://f"]
    with pytest.raises(SystemExit) as exit_info:
        l2_healer.parse_args(base + bad)
    assert exit_info.value.code == 2
    assert len([line for line in capsys.readouterr().err.splitlines() if "error:" in line]) == 1


def test_the_script_is_python_3_9_syntax() -> None:
    ast.parse(script_text(HEALER), feature_version=(3, 9))
