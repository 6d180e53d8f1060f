"""The L2 healer against a real kernel FUSE mount with injected faults (tests/k8s/curvine/faultfs.py), mounted where
curvine-csi's FUSE pod mounts and bind-mounted into a temporary kubelet tree as curvine-csi does, and a recorded
Kubernetes API on 127.0.0.1. The healer reads only the real mount table (/proc/<pid>/mountinfo): it evicts only the
pods whose bind mount is left on a dead FUSE connection once the node's FUSE was started again, never on a master
outage, a hung or slow FUSE or lost blocks, holds while the master or the node's FUSE is down or too many nodes report,
one namespace it cannot list stops no other, and it does all that as a non-root user that cannot read the pods'
directories."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.k8s.curvine.scripts import HEALER, l2_healer, script_text
from kvtier.k8s.curvine.scripts.l2_healer import (
    EXIT_NO_API,
    EXIT_OK,
    EXIT_USAGE,
    Healer,
    Kube,
    l2_mounts,
    live_connections,
    parse_mountinfo,
    read_mountinfo,
)
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
MOUNTINFO = "/proc/self/mountinfo"  # this process's mount table: the fixture's mounts, as the node's shows them
FSTYPE = "fuse.curvinefs"
NON_ROOT = 65532  # the chart's HEALER_UID


def kubelet_volume(pods: Path, uid: str, pv: str) -> Path:
    """The kubelet's target path of a CSI volume of a pod (pkg/volume/csi), where curvine-csi bind-mounts the FUSE."""
    volume = pods / uid / "volumes" / "kubernetes.io~csi" / pv
    volume.mkdir(parents=True)
    (volume / "vol_data.json").write_text(json.dumps({"driverName": "curvine", "specVolID": pv}))
    return volume / "mount"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    with fake_cluster() as c:
        yield c


@pytest.fixture
def fuse(tmp_path: Path) -> Iterator[FaultFS]:
    """The node's FUSE mount, under the plugins directory as curvine-csi's (`<plugins>/<mount key>/fuse-mount`)."""
    with mount(tmp_path / "fuse", mountpoint=tmp_path / "plugins" / "key" / "fuse-mount") as fs:
        (fs.path / "retail").mkdir()
        yield fs


def healer(cluster: FakeCluster, tmp_path: Path, token: Path | None = None, **kwargs: Any) -> Healer:
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
        MOUNTINFO,
        str(tmp_path / "pods"),
        str(tmp_path / "plugins"),
        FSTYPE,
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


def test_reads_the_mount_table_the_kernel_writes(tmp_path: Path, fuse: FaultFS) -> None:
    """Only the fuse.curvinefs mounts at a pod's CSI target path count; the node's FUSE mount is the live one."""
    pods = tmp_path / "pods"
    fuse.bind(kubelet_volume(pods, "uid-1", "kvtier-dev-retail-l2"))
    fuse.bind(pods / "uid-2" / "volumes" / "kubernetes.io~empty-dir" / "x")  # not a CSI volume
    fuse.bind(kubelet_volume(pods, "uid 3", "pv with space"))  # mountinfo escapes the spaces
    other = tmp_path / "plain"
    other.mkdir()
    target = kubelet_volume(pods, "uid-4", "pvc-ebs")
    target.mkdir()
    subprocess.run(["mount", "--bind", str(other), str(target)], check=True, timeout=10)
    try:
        entries = read_mountinfo(MOUNTINFO)
        found = l2_mounts(entries, str(pods), FSTYPE)
        live = live_connections(entries, str(tmp_path / "plugins"), FSTYPE)
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False, timeout=10)
    assert [(m.pod_uid, m.volume) for m in found] == [("uid 3", "pv with space"), ("uid-1", "kvtier-dev-retail-l2")]
    assert len(live) == 1 and {m.dev for m in found} == live, "a bind mount shares its FUSE mount's connection"
    st_dev = fuse.path.stat().st_dev
    assert live == {f"{os.major(st_dev)}:{os.minor(st_dev)}"}, "major:minor is the FUSE mount's st_dev"


def test_a_fuse_started_again_on_top_of_a_dead_one_is_the_live_one(tmp_path: Path, fuse: FaultFS) -> None:
    """A new FUSE mount stacked on its predecessor's mount point (the old one not unmounted) is the node's now."""
    pods = tmp_path / "pods"
    fuse.bind(kubelet_volume(pods, "uid-old", "kvtier-dev-retail-l2"))
    with mount(tmp_path / "fuse-2", source=fuse.source, mountpoint=fuse.path) as new:
        fuse.kill_daemon()  # the lower one dies under the new one
        new.bind(kubelet_volume(pods, "uid-new", "kvtier-dev-retail-l2"))
        entries = read_mountinfo(MOUNTINFO)
        live = live_connections(entries, str(tmp_path / "plugins"), FSTYPE)
        by_pod = {m.pod_uid: m.dev in live for m in l2_mounts(entries, str(pods), FSTYPE)}
    assert by_pod == {"uid-old": False, "uid-new": True}


def test_parses_mountinfo_lines_with_and_without_optional_fields() -> None:
    text = (
        "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
        "37 36 0:52 / /p/u/volumes/kubernetes.io~csi/v/mount rw - fuse.curvinefs curvinefs rw\n"
        "not a mount line\n"
    )
    first, second = parse_mountinfo(text)
    assert (first.mount_id, first.parent_id, first.dev, first.mount_point) == (36, 35, "98:0", "/mnt/a b")
    assert (second.fstype, second.dev) == ("fuse.curvinefs", "0:52")


@pytest.mark.parametrize(
    ("kind", "params"),
    [("master_down", {"block_s": 0.3}), ("master_down", {"block_s": 5}), ("hung", {})],
)
def test_a_master_outage_or_a_hung_fuse_evicts_nothing(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster, kind: str, params: dict[str, Any]
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    cluster.master_up = kind == "hung"  # a hung FUSE with a live master: nothing for the healer to see
    h = healer(cluster, tmp_path)
    fuse.set_fault(kind, **params)
    for _ in range(3):
        started = time.monotonic()
        report = h.check()
        assert time.monotonic() - started < 3, "the healer never touches the mounts: a hang cannot stall it"
        assert report["evicted_pods"] == [] and cluster.deleted == [] and report["dead_mounts"] == {}
    if kind == "master_down":
        assert report["down"] == ["master"] and not h.ready, "reported (readiness), not healed"
    else:
        assert h.ready


@pytest.mark.parametrize(("kind", "params"), [("slow", {"delay_s": 0.5}), ("lost", {"paths": ["retail/a.data"]})])
def test_a_slow_worker_or_lost_blocks_evict_nothing(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster, kind: str, params: dict[str, Any]
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    (fuse.path / "retail" / "a.data").write_bytes(b"x" * 4096)
    fuse.set_fault(kind, **params)
    h = healer(cluster, tmp_path)
    for _ in range(3):
        assert h.check()["evicted_pods"] == []
    assert cluster.deleted == [] and h.ready, "the mounts are live: LMCache sees the read errors, not the healer"


def test_a_dead_fuse_is_reported_then_healed_once_started_again(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster
) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    with mount(tmp_path / "other", mountpoint=tmp_path / "plugins" / "key2" / "fuse-mount") as live:
        live.bind(kubelet_volume(pods, "uid-live", "kvtier-dev-search-l2"))  # another LOB on a FUSE that stays
        fuse.bind(kubelet_volume(pods, "uid-no-claim", "kvtier-dev-retail-l2"))
        fuse.bind(kubelet_volume(pods, "uid-other-ns", "kvtier-dev-x-l2"))
        fuse.bind(kubelet_volume(pods, "uid-leaving", "kvtier-dev-retail-l2"))
        cluster.pods += [
            pod("kvtier-search", "engine-live", "uid-live"),
            pod("kvtier-retail", "no-l2", "uid-no-claim", claim=None),  # a Curvine mount, not the L2 claim
            pod("kube-system", "not-ours", "uid-other-ns"),  # not a LOB namespace: never even listed
            pod("kvtier-retail", "leaving", "uid-leaving", deleting=True),
        ]
        h = healer(cluster, tmp_path, token=token, dead_checks=2)
        fuse.kill_daemon()
        cluster.fuse_up = False  # its web server died with it
        for _ in range(2):
            dying = h.check()
            assert dying["evicted_pods"] == [] and dying["down"] == ["fuse"] and not h.ready
            assert dying["dead_mounts"] == {}, "still the node's mount: a new pod would get the same dead one"
        fuse.restart()
        cluster.fuse_up = True
        first = h.check()
        assert first["evicted_pods"] == [] and len(first["dead_mounts"]) == 5, "one check is not enough"
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
    fuse.restart()
    h = healer(cluster, tmp_path)
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
    fuse.restart()
    report = healer(cluster, tmp_path).check()
    assert report["held"] == "brake" and report["healers_reporting"] == "4/10" and cluster.deleted == []


def test_rate_limited_per_endpoint(tmp_path: Path, fuse: FaultFS, cluster: FakeCluster) -> None:
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    for p in cluster.pods[:2]:  # both replicas of one endpoint
        p["metadata"]["ownerReferences"][0]["name"] = "engine-rs"
    now = [1000.0]
    h = healer(cluster, tmp_path, endpoint_interval_s=300, clock=lambda: now[0])
    fuse.restart()
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
    fuse.restart()
    h = healer(cluster, tmp_path)
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
    fuse.restart()
    h = healer(cluster, tmp_path, namespace_selector="kvtier.io/line-of-business")
    h.namespaces = []  # nothing named: a LOB added after the healer started is found all the same
    assert sorted(h.check()["evicted_pods"]) == ["kvtier-retail/engine-a", "kvtier-retail/engine-b"]


def healer_args(cluster: FakeCluster, tmp_path: Path, *extra: str, mountinfo: str = MOUNTINFO) -> list[str]:
    return [
        f"--node={NODE}",
        "--namespace=kvtier-retail",
        f"--mountinfo={mountinfo}",
        f"--pods-dir={tmp_path / 'pods'}",
        f"--fuse-dir={tmp_path / 'plugins'}",
        f"--api-url={cluster.url}",
        f"--master-url={cluster.master_url}",
        f"--fuse-health-url={cluster.fuse_health_url}",
        f"--healer-namespace={HEALER_NAMESPACE}",
        f"--healer-selector={HEALER_SELECTOR}",
        "--token-file=",
        *extra,
    ]


def run_healer(cluster: FakeCluster, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    # The shipped script as the DaemonSet runs it: its own process, standard library only.
    args = healer_args(cluster, tmp_path, *extra)
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
    two_l2_pods(tmp_path / "pods", fuse, cluster)
    port = free_port()
    process = run_healer(
        cluster, tmp_path, "--interval-seconds=0.5", "--dead-checks=2", f"--health-port={port}",
        "--health-host=127.0.0.1",
    )  # fmt: skip
    try:
        fuse.set_fault("master_down", block_s=3)
        cluster.master_up = False
        deadline = time.monotonic() + 20
        while get(f"http://127.0.0.1:{port}/readyz") != (503, "the master does not answer\n"):
            assert time.monotonic() < deadline, "the outage shows in /readyz"
            time.sleep(0.2)
        time.sleep(4)  # eight checks during the outage
        assert cluster.deleted == [], "a master outage restarts nothing"
        fuse.set_fault("none")
        cluster.master_up = True
        fuse.restart()
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


def _python_for(uid: int) -> str | None:
    """A python3 the user `uid` can run (this venv's may live in root's home), or None."""
    for python in (sys.executable, shutil.which("python3") or "", "/usr/bin/python3"):
        if not python:
            continue
        probe = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", python, "-c", "pass"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            return python
    return None


def test_a_non_root_healer_with_only_the_mount_table_heals_and_cannot_read_the_pods(
    tmp_path: Path, fuse: FaultFS, cluster: FakeCluster
) -> None:
    """The chart's configuration for real: the script as uid 65532 without capabilities, given one file, the mount
    table bind-mounted as the kubelet mounts the hostPath /proc/1/mountinfo. It heals the dead pods, and the same
    user cannot read a pod's Secret volume (root's, mode 0700 like the kubelet's pod directories)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs the tests as root with util-linux setpriv")
        pytest.skip("needs root and setpriv (util-linux) to run the healer as another user")
    python = _python_for(NON_ROOT)
    if python is None:
        pytest.fail(f"no python3 that uid {NON_ROOT} can run")
    pods = tmp_path / "pods"
    two_l2_pods(pods, fuse, cluster)
    secret = pods / "uid-a" / "volumes" / "kubernetes.io~secret" / "token"
    secret.mkdir(parents=True)
    (secret / "token").write_text("another pod's token\n")
    for directory in (pods, *pods.iterdir()):
        directory.chmod(0o700)
    shared = Path(tempfile.mkdtemp(prefix="kvtier-healer-"))
    try:
        shared.chmod(0o755)
        script = shared / HEALER
        script.write_text(script_text(HEALER))
        table = shared / "mountinfo"
        table.touch()
        subprocess.run(["mount", "--bind", f"/proc/{os.getpid()}/mountinfo", str(table)], check=True, timeout=10)
        try:
            fuse.restart()
            as_healer = ["setpriv", f"--reuid={NON_ROOT}", f"--regid={NON_ROOT}", "--clear-groups", "--inh-caps=-all"]
            args = healer_args(cluster, tmp_path, "--dead-checks=1", "--once", mountinfo=str(table))
            done = subprocess.run(
                [*as_healer, python, str(script), *args], capture_output=True, text=True, timeout=60, check=False
            )
            peek = subprocess.run(
                [*as_healer, "cat", str(secret / "token")], capture_output=True, text=True, timeout=30, check=False
            )
        finally:
            subprocess.run(["umount", "-l", str(table)], check=False, timeout=10)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert done.returncode == EXIT_OK, done.stderr
    assert sorted(json.loads(done.stdout)["evicted_pods"]) == ["kvtier-retail/engine-a", "kvtier-retail/engine-b"]
    assert peek.returncode != 0 and "Permission denied" in peek.stderr and "token" not in peek.stdout


def test_once_on_a_healthy_node_exits_0(tmp_path: Path, cluster: FakeCluster) -> None:
    process = run_healer(cluster, tmp_path, "--once")
    out, _ = process.communicate(timeout=30)
    assert process.returncode == EXIT_OK and json.loads(out)["mounts"] == 0


def test_an_unreachable_api_evicts_nothing_and_exits_3(
    tmp_path: Path, fuse: FaultFS, capsys: pytest.CaptureFixture[str]
) -> None:
    fuse.bind(kubelet_volume(tmp_path / "pods", "uid-dead", "kvtier-dev-retail-l2"))
    fuse.restart()
    with fake_cluster() as health:  # master and FUSE answer; the API does not
        args = l2_healer.parse_args(
            [f"--node={NODE}", "--namespace=kvtier-retail", f"--mountinfo={MOUNTINFO}",
             f"--pods-dir={tmp_path / 'pods'}", f"--fuse-dir={tmp_path / 'plugins'}", "--api-url=http://127.0.0.1:9",
             f"--master-url={health.master_url}", f"--fuse-health-url={health.fuse_health_url}",
             "--dead-checks=1", "--once"]
        )  # fmt: skip
        assert l2_healer.run(args) == EXIT_NO_API
    assert "kvtier-retail" in json.loads(capsys.readouterr().out)["namespace_errors"]


def test_an_unreadable_mount_table_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = l2_healer.parse_args(
        [f"--node={NODE}", f"--mountinfo={tmp_path / 'missing'}", "--api-url=http://127.0.0.1:9",
         "--master-url=http://m", "--fuse-health-url=http://f", "--once"]
    )  # fmt: skip
    assert l2_healer.run(args) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--mountinfo" in err[0] and "/proc/1/mountinfo" in err[0]


@pytest.mark.parametrize(
    "bad",
    [
        ["--interval-seconds=0"],
        ["--dead-checks=0"],
        ["--brake-share=1.5"],
        ["--health-port=70000"],
        ["--master-url="],
        ["--pods-dir=relative"],
        ["--fstype="],
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
