"""A tiny recorded Kubernetes API and Curvine health endpoints on 127.0.0.1, for the healer's tests (unit, process and
the engine chaos run): pod lists by namespace and field/label selector, the Eviction API and pod deletes (with
PodDisruptionBudget refusals and forbidden namespaces), a Curvine master's /api/overview and a FUSE /healthz, each switchable."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

NODE = "hyperpod-i-0abc"
HEALER_NAMESPACE = "curvine"
HEALER_SELECTOR = "app.kubernetes.io/component=l2-healer"


def pod(
    namespace: str,
    name: str,
    uid: str,
    claim: str | None = "l2-cache",
    deleting: bool = False,
    owner: str | None = None,
    node: str = NODE,
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    volumes = [{"name": "kvtier-l2", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": uid, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "controller": True, "uid": f"rs-{owner}"}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "volumes": [*volumes, {"name": "x", "emptyDir": {}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def healer_pods(total: int, reporting: int) -> list[dict[str, Any]]:
    """The healer DaemonSet's pods, `reporting` of them not Ready (their node reports broken mounts)."""
    labels = {"app.kubernetes.io/component": "l2-healer"}
    return [
        pod(HEALER_NAMESPACE, f"healer-{i}", f"h-{i}", claim=None, node=f"n{i}", ready=i >= reporting, labels=labels)
        for i in range(total)
    ]


@dataclass
class FakeCluster:
    url: str = ""
    pods: list[dict[str, Any]] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)  # namespaces whose list answers 403
    pdb_blocked: set[str] = field(default_factory=set)  # pod names whose eviction answers 429
    master_up: bool = True
    fuse_up: bool = True
    lost_workers: list[int] = field(default_factory=list)  # what /master/api/workers lists as lost
    evictions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # Eviction API calls (dry runs)
    deleted: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def master_url(self) -> str:
        return f"{self.url}/master"

    @property
    def fuse_health_url(self) -> str:
        return f"{self.url}/fuse/healthz"

    def deleted_names(self) -> list[str]:
        """namespace/name of every pod deleted, in order."""
        with self.lock:
            return [path.split("/")[4] + "/" + path.split("/")[6] for path, _ in self.deleted]


def _matches(item: dict[str, Any], query: dict[str, list[str]]) -> bool:
    field_selector = query.get("fieldSelector", [""])[0]
    if field_selector and field_selector != f"spec.nodeName={item['spec']['nodeName']}":
        return False
    for term in filter(None, query.get("labelSelector", [""])[0].split(",")):
        key, _, value = term.partition("=")
        if item["metadata"].get("labels", {}).get(key) != value:
            return False
    return True


@contextmanager
def fake_cluster() -> Iterator[FakeCluster]:
    cluster = FakeCluster()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if url.path == "/master/api/overview":
                self._reply(200 if cluster.master_up else 503, {"live_workers": 1})
                return
            if url.path == "/master/api/workers":  # curvine-master router_handler.rs `workers`
                workers = {
                    "live_workers": [{"address": {"worker_id": 1}}],
                    "lost_workers": [{"address": {"worker_id": w}} for w in cluster.lost_workers],
                }
                self._reply(200 if cluster.master_up else 503, workers)
                return
            if url.path == "/fuse/healthz":
                self._reply(200 if cluster.fuse_up else 503, {})
                return
            if url.path == "/api/v1/namespaces":
                selector = parse_qs(url.query).get("labelSelector", [""])[0]
                names = sorted({p["metadata"]["namespace"] for p in cluster.pods} | cluster.forbidden)
                items = [{"metadata": {"name": n}} for n in names if selector and n.startswith("kvtier-")]
                self._reply(200, {"kind": "NamespaceList", "items": items})
                return
            namespace = url.path.split("/")[4]  # /api/v1/namespaces/<ns>/pods
            with cluster.lock:
                cluster.listed.append(namespace)
                cluster.tokens.add(self.headers.get("Authorization", ""))
            if namespace in cluster.forbidden:
                self._reply(403, {"kind": "Status", "reason": "Forbidden"})
                return
            query = parse_qs(url.query)
            items = [p for p in cluster.pods if p["metadata"]["namespace"] == namespace and _matches(p, query)]
            self._reply(200, {"kind": "PodList", "items": items})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if body.get("metadata", {}).get("name") in cluster.pdb_blocked:
                self._reply(429, {"kind": "Status", "reason": "TooManyRequests"})
                return
            with cluster.lock:
                cluster.evictions.append((self.path, body))
            self._reply(201, {"kind": "Status", "status": "Success"})

        def do_DELETE(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            with cluster.lock:
                cluster.deleted.append((self.path, body))
                for item in cluster.pods:  # the API server marks the pod for graceful deletion
                    if item["metadata"]["uid"] == body.get("preconditions", {}).get("uid"):
                        item["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
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

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cluster.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield cluster
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
