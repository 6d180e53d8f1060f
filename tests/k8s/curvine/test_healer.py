"""The L2 healer on a real temporary kubelet tree against a stubbed Kubernetes API (127.0.0.1): which mounts it finds,
how it tells a dead or hung mount from a live one, which pods it deletes (and which never), and its readiness."""

from __future__ import annotations

import ast
import errno
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from kvtier.k8s.curvine.scripts import HEALER, l2_healer, script_text
from kvtier.k8s.curvine.scripts.l2_healer import EXIT_NO_API, EXIT_OK, Healer, Kube, check_mount, find_mounts

NODE = "hyperpod-i-0abc"


def kubelet_volume(pods: Path, uid: str, pv: str, driver: str = "curvine") -> Path:
    """What the kubelet leaves for a CSI volume of a pod (pkg/volume/csi): vol_data.json next to `mount`."""
    volume = pods / uid / "volumes" / "kubernetes.io~csi" / pv
    (volume / "mount").mkdir(parents=True)
    (volume / "vol_data.json").write_text(json.dumps({"driverName": driver, "specVolID": pv, "volumeHandle": "h"}))
    return volume / "mount"


def pod(namespace: str, name: str, uid: str, claim: str | None = "l2-cache", deleting: bool = False) -> dict[str, Any]:
    volumes = [{"name": "kvtier-l2", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": NODE, "volumes": [*volumes, {"name": "x", "emptyDir": {}}]}}


class _Api(BaseHTTPRequestHandler):
    pods: ClassVar[list[dict[str, Any]]] = []
    deleted: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    listed: ClassVar[list[str]] = []
    tokens: ClassVar[set[str]] = set()

    def do_GET(self) -> None:
        url = urlparse(self.path)
        parts = url.path.split("/")  # /api/v1/namespaces/<ns>/pods
        namespace = parts[4]
        selector = parse_qs(url.query).get("fieldSelector", [""])[0]
        self.listed.append(namespace)
        self.tokens.add(self.headers.get("Authorization", ""))
        items = [
            p
            for p in self.pods
            if p["metadata"]["namespace"] == namespace and selector == f"spec.nodeName={p['spec']['nodeName']}"
        ]
        self._reply(200, {"kind": "PodList", "items": items})

    def do_DELETE(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.deleted.append((self.path, body))
        self._reply(200, {"kind": "Status", "status": "Success"})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
        return


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Kube]:
    _Api.pods, _Api.deleted, _Api.listed, _Api.tokens = [], [], [], set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    try:
        yield Kube(f"http://127.0.0.1:{server.server_address[1]}", str(token), None, timeout_s=10)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def healer(kube: Kube, pods_dir: Path, **kwargs: Any) -> Healer:
    return Healer(
        kube, NODE, ["kvtier-retail", "kvtier-search"], "l2-cache", str(pods_dir), "curvine", 1.0, 3, **kwargs
    )


@pytest.fixture
def dead(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """Paths whose stat fails as a bind mount of a dead FUSE process does (ENOTCONN); the rest are real."""
    paths: set[str] = set()
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if os.fspath(path) in paths:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    yield paths
    monkeypatch.undo()


def test_finds_only_the_curvine_volumes_of_pods(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    mount = kubelet_volume(pods, "uid-1", "kvtier-dev-retail-l2")
    kubelet_volume(pods, "uid-2", "pvc-ebs", driver="ebs.csi.aws.com")
    (pods / "uid-3" / "volumes" / "kubernetes.io~empty-dir" / "x").mkdir(parents=True)
    broken = pods / "uid-4" / "volumes" / "kubernetes.io~csi" / "half"
    broken.mkdir(parents=True)
    (broken / "vol_data.json").write_text("{not json")  # being written: skipped, not fatal
    found = find_mounts(str(pods), "curvine")
    assert [(m.pod_uid, m.volume, m.path) for m in found] == [("uid-1", "kvtier-dev-retail-l2", str(mount))]


def test_check_mount_tells_live_gone_dead_and_hung(
    tmp_path: Path, dead: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    (live / "a.data").write_bytes(b"x")
    assert check_mount(str(live), 1.0) == "ok"
    assert check_mount(str(tmp_path / "absent"), 1.0) == "gone"
    broken = tmp_path / "dead"
    broken.mkdir()
    dead.add(str(broken))
    assert check_mount(str(broken), 1.0) == "dead: ENOTCONN"
    release = threading.Event()
    real_scandir = os.scandir

    def stuck(path: Any) -> Any:
        if os.fspath(path) == str(live):
            release.wait(30)  # a FUSE daemon that never answers
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", stuck)
    started = time.monotonic()
    try:
        assert check_mount(str(live), 0.2) == "hung"
        assert time.monotonic() - started < 5, "the timeout bounds the check"
    finally:
        release.set()


def test_dead_mounts_get_their_pods_deleted_and_nothing_else(tmp_path: Path, api: Kube, dead: set[str]) -> None:
    pods = tmp_path / "pods"
    dead.add(str(kubelet_volume(pods, "uid-dead", "kvtier-dev-retail-l2")))
    dead.add(str(kubelet_volume(pods, "uid-other-ns", "kvtier-dev-x-l2")))
    dead.add(str(kubelet_volume(pods, "uid-no-claim", "kvtier-dev-retail-l2")))
    dead.add(str(kubelet_volume(pods, "uid-leaving", "kvtier-dev-retail-l2")))
    kubelet_volume(pods, "uid-live", "kvtier-dev-search-l2")
    _Api.pods = [
        pod("kvtier-retail", "engine-0", "uid-dead"),
        pod("kube-system", "not-ours", "uid-other-ns"),  # not a LOB namespace: never even listed
        pod("kvtier-retail", "no-l2", "uid-no-claim", claim=None),  # holds a Curvine mount but not the L2 claim
        pod("kvtier-retail", "leaving", "uid-leaving", deleting=True),
        pod("kvtier-search", "engine-1", "uid-live"),
    ]
    h = healer(api, pods)
    report = h.check()
    assert report["deleted_pods"] == ["kvtier-retail/engine-0"]
    assert [path for path, _ in _Api.deleted] == ["/api/v1/namespaces/kvtier-retail/pods/engine-0"]
    assert _Api.deleted[0][1]["preconditions"] == {"uid": "uid-dead"}, "never the replacement of the same name"
    assert set(_Api.listed) == {"kvtier-retail", "kvtier-search"}
    assert _Api.tokens == {"Bearer secret-token"}
    assert not h.ready
    assert len(report["not_answering"]) == 4


def test_a_live_node_deletes_nothing_and_is_ready(tmp_path: Path, api: Kube) -> None:
    pods = tmp_path / "pods"
    kubelet_volume(pods, "uid-live", "kvtier-dev-retail-l2")
    _Api.pods = [pod("kvtier-retail", "engine-0", "uid-live")]
    h = healer(api, pods)
    report = h.check()
    assert report["deleted_pods"] == [] and _Api.deleted == [] and _Api.listed == []
    assert h.ready


def test_a_hung_mount_is_healed_after_three_checks(tmp_path: Path, api: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    pods = tmp_path / "pods"
    mount = kubelet_volume(pods, "uid-hung", "kvtier-dev-retail-l2")
    _Api.pods = [pod("kvtier-retail", "engine-0", "uid-hung")]
    monkeypatch.setattr(l2_healer, "check_mount", lambda path, timeout: "hung" if path == str(mount) else "ok")
    h = healer(api, pods)
    assert h.check()["deleted_pods"] == []
    assert h.check()["deleted_pods"] == []
    assert not h.ready
    assert h.check()["deleted_pods"] == ["kvtier-retail/engine-0"]


def test_dry_run_reports_and_deletes_nothing(tmp_path: Path, api: Kube, dead: set[str]) -> None:
    pods = tmp_path / "pods"
    dead.add(str(kubelet_volume(pods, "uid-dead", "kvtier-dev-retail-l2")))
    _Api.pods = [pod("kvtier-retail", "engine-0", "uid-dead")]
    report = healer(api, pods, dry_run=True).check()
    assert report["deleted_pods"] == ["kvtier-retail/engine-0"] and _Api.deleted == []


def test_an_unreachable_api_deletes_nothing_and_exits_3(
    tmp_path: Path, dead: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    pods = tmp_path / "pods"
    dead.add(str(kubelet_volume(pods, "uid-dead", "kvtier-dev-retail-l2")))
    args = l2_healer.parse_args(
        [f"--node={NODE}", "--namespace=kvtier-retail", f"--pods-dir={pods}", "--api-url=http://127.0.0.1:9", "--once"]
    )
    assert l2_healer.run(args) == EXIT_NO_API
    assert "Kubernetes API" in capsys.readouterr().err


def test_once_on_a_healthy_node_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = l2_healer.parse_args([f"--node={NODE}", f"--pods-dir={tmp_path}", "--api-url=http://127.0.0.1:9", "--once"])
    assert l2_healer.run(args) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["mounts"] == 0


def test_the_script_is_python_3_9_syntax() -> None:
    ast.parse(script_text(HEALER), feature_version=(3, 9))
