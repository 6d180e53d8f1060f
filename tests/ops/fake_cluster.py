"""A recorded Kubernetes API on 127.0.0.1 with the few controllers the FUSE roll and voluntary disruptions meet
(issue 38), for `kvtier l2 roll-fuse`, `kvtier status` and the PodDisruptionBudget tests. kvtier talks to it with its
own client (kubernetes python client through kvtier/ops/kube.py), the healer with its own (l2_healer.Kube).

The API: nodes (list by label, read, merge patch), pods (list by namespace or all, label and `spec.nodeName` field
selectors; read, create, graceful delete with a uid precondition), the Eviction subresource (dry run or not). Every
write is appended to `events`, in order, which is what the tests check.

What runs behind it, one `tick` every TICK_S (a thread) or on demand:
- the kubelet: a deleted pod goes after GRACE_TICKS; a Pending pod on a Ready node runs;
- curvine-csi's node plugin: a pod on a node that mounts an L2 or FUSE-check claim, where no FUSE pod runs, makes it
  start one with the image the plugin is told (`plugin_image`); it is Ready after FUSE_READY_TICKS unless the node is
  in `fuse_never_answers`; the FUSE check pod succeeds once the node's FUSE pod is Ready;
- each node's L2 healer, every HEALER_TICKS: L2 pods that started before the node's FUSE pod have dead mounts; it
  removes one per controller per ENDPOINT_TICKS exactly as the real script does (l2_healer.Kube.evict_pod: an
  Eviction dry run, then a delete by uid), while the node's FUSE pod is Ready;
- Deployments (`deployments`): a controller keeps `replicas` live pods, new ones on a schedulable Ready node;
- PodDisruptionBudgets (`pdbs`, the objects kvtier renders): evaluated on each eviction as the API server does
  (kubernetes pkg/registry/core/pod/storage/eviction.go, pkg/controller/disruption/disruption.go;
  docs/references.md "Issue 38"): more than one budget for a pod is an error (500); a pod that is not Ready is
  evictable under `unhealthyPodEvictionPolicy: AlwaysAllow`; otherwise disruptionsAllowed = healthy pods (Ready, not
  being deleted) minus desired healthy (`maxUnavailable`: the controllers' replicas minus it; `minAvailable`: it),
  and 0 is 429.
"""

from __future__ import annotations

import copy
import json
import threading
import urllib.error
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kvtier.k8s.curvine import fuse_check, names
from kvtier.k8s.curvine.scripts.l2_healer import Kube
from kvtier.serving import L2_CLAIM

TICK_S = 0.05
GRACE_TICKS = 3
FUSE_READY_TICKS = 2
POD_READY_TICKS = 3
HEALER_TICKS = 2
ENDPOINT_TICKS = 6  # the healer's per-endpoint interval, in ticks
EPOCH = datetime(2026, 12, 1, tzinfo=UTC)
GPU_LABELS = {"kvtier.io/role": "gpu"}


def _stamp(tick: int) -> str:
    return (EPOCH + timedelta(seconds=tick)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions", []))


def _set_ready(obj: dict[str, Any], ready: bool) -> None:
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]


def _labels_match(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch (what `patch_node` sends with `application/merge-patch+json`)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


@dataclass
class Deployment:
    namespace: str
    name: str
    replicas: int
    labels: dict[str, str]
    l2: bool = True


@dataclass
class FakeCluster:
    url: str = ""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    deployments: list[Deployment] = field(default_factory=list)
    pdbs: list[dict[str, Any]] = field(default_factory=list)
    plugin_image: dict[str, str] = field(default_factory=dict)  # node -> the FUSE image its node plugin builds
    fuse_never_answers: set[str] = field(default_factory=set)
    events: list[str] = field(default_factory=list)
    healer_running: bool = True
    tick_count: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    _uid: int = 0
    _last_eviction: dict[str, int] = field(default_factory=dict)

    # ---- building the cluster --------------------------------------------------------------------------------------

    def node(self, name: str, *, ready: bool = True) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": dict(GPU_LABELS), "annotations": {}},
            "spec": {},
            "status": {},
        }
        _set_ready(body, ready)
        self.nodes[name] = body

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        labels: dict[str, str] | None = None,
        owner: str | None = None,
        claim: str | None = None,
        containers: list[dict[str, Any]] | None = None,
        ready: bool = True,
        phase: str = "Running",
    ) -> dict[str, Any]:
        self._uid += 1
        meta: dict[str, Any] = {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{self._uid}",
            "labels": dict(labels or {}),
            "creationTimestamp": _stamp(self.tick_count),
            "annotations": {},
        }
        if owner:
            meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "controller": True, "uid": f"rs-{owner}"}]
        volumes = [{"name": "l2", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"nodeName": node, "volumes": volumes, "containers": containers or [{"name": "c", "image": "x"}]},
            "status": {"phase": phase, "ready_at": None},
        }
        _set_ready(pod, ready)
        self.pods[(namespace, name)] = pod
        return pod

    def fuse_pod(self, node: str, image: str) -> dict[str, Any]:
        container = [{"name": "curvine-fuse", "image": image}]
        return self.add_pod(names.NAMESPACE, f"curvine-csi-standalone-{node}", node, labels={**names.FUSE_POD_LABELS,
                            "curvine.io/node": node}, containers=container)  # fmt: skip

    def plugin(self, node: str, image: str) -> None:
        self.plugin_image[node] = image
        env = [{"name": "STANDALONE_IMAGE", "value": image}]
        container = [{"name": "csi-plugin", "image": image, "env": env}]
        self.add_pod(names.NAMESPACE, f"curvine-csi-node-{node}", node, labels=names.component_labels("csi-node"),
                     containers=container)  # fmt: skip

    def deployment(self, namespace: str, name: str, replicas: int, labels: dict[str, str], nodes: list[str]) -> None:
        """A Deployment's pods, one per listed node (its L2 claim mounted)."""
        self.deployments.append(Deployment(namespace, name, replicas, labels))
        for i, node in enumerate(nodes):
            self.add_pod(namespace, f"{name}-{i}", node, labels=labels, owner=name, claim=L2_CLAIM)

    # ---- reading ---------------------------------------------------------------------------------------------------

    def pods_of(self, node: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                p
                for p in self.pods.values()
                if p["spec"]["nodeName"] == node and namespace in (None, p["metadata"]["namespace"])
            ]

    def fuse_of(self, node: str) -> dict[str, Any] | None:
        return next(
            (
                p
                for p in self.pods_of(node, names.NAMESPACE)
                if p["metadata"]["labels"].get("app") == "curvine-standalone"
                and "deletionTimestamp" not in p["metadata"]
            ),
            None,
        )

    def count(self, prefix: str) -> int:
        return sum(1 for e in self.events if e.startswith(prefix))

    # ---- the API ---------------------------------------------------------------------------------------------------

    def list_pods(self, namespace: str | None, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        labels = query.get("labelSelector", [""])[0]
        fields = query.get("fieldSelector", [""])[0]
        out = []
        for pod in self.pods.values():
            if namespace is not None and pod["metadata"]["namespace"] != namespace:
                continue
            if fields and fields != f"spec.nodeName={pod['spec']['nodeName']}":
                continue
            if labels and not _labels_match(labels, pod["metadata"]["labels"]):
                continue
            out.append(pod)
        return out

    def delete(self, namespace: str, name: str, uid: str | None = None) -> int:
        pod = self.pods.get((namespace, name))
        if pod is None:
            return 404
        if uid and pod["metadata"]["uid"] != uid:
            return 409
        if "deletionTimestamp" not in pod["metadata"]:
            pod["metadata"]["deletionTimestamp"] = _stamp(self.tick_count)
            pod["metadata"]["deleting_at"] = self.tick_count
            _set_ready(pod, False)
            self.events.append(f"delete {namespace}/{name}")
        return 200

    def budgets(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            b
            for b in self.pdbs
            if b["metadata"]["namespace"] == pod["metadata"]["namespace"]
            and all(pod["metadata"]["labels"].get(k) == v for k, v in b["spec"]["selector"]["matchLabels"].items())
        ]

    def disruptions_allowed(self, budget: dict[str, Any]) -> int:
        """pkg/controller/disruption: healthy = Ready and not being deleted; desired from the budget."""
        selector = budget["spec"]["selector"]["matchLabels"]
        matching = [
            p
            for p in self.pods.values()
            if p["metadata"]["namespace"] == budget["metadata"]["namespace"]
            and all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())
        ]
        healthy = sum(1 for p in matching if _ready(p) and "deletionTimestamp" not in p["metadata"])
        spec = budget["spec"]
        if "maxUnavailable" in spec:
            owners = {
                p["metadata"]["ownerReferences"][0]["name"] for p in matching if p["metadata"].get("ownerReferences")
            }
            expected = sum(d.replicas for d in self.deployments if d.name in owners)
            desired = max(0, expected - int(spec["maxUnavailable"]))
        else:
            desired = int(spec["minAvailable"])
        return max(0, healthy - desired)

    def evict(self, namespace: str, name: str, dry_run: bool) -> tuple[int, str]:
        """pkg/registry/core/pod/storage/eviction.go, for the cases kvtier meets."""
        pod = self.pods.get((namespace, name))
        if pod is None:
            return 404, "NotFound"
        if "deletionTimestamp" in pod["metadata"] or pod["status"]["phase"] in ("Succeeded", "Failed", "Pending"):
            if not dry_run:  # canIgnorePDB: a pod that serves nothing is deleted without asking a budget
                self.delete(namespace, name)
            return 201, "Success"
        budgets = self.budgets(pod)
        if len(budgets) > 1:
            return (
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        if budgets:
            budget = budgets[0]
            policy = budget["spec"].get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
            unhealthy_allowed = not _ready(pod) and policy == "AlwaysAllow"
            if not unhealthy_allowed and self.disruptions_allowed(budget) <= 0:
                self.events.append(f"refuse eviction {namespace}/{name} ({budget['metadata']['name']})")
                return 429, "Cannot evict pod as it would violate the pod's disruption budget."
        self.events.append(f"{'dry-run ' if dry_run else ''}evict {namespace}/{name}")
        if not dry_run:
            self.delete(namespace, name)
        return 201, "Success"

    # ---- what runs behind the API ---------------------------------------------------------------------------------

    def tick(self) -> None:
        with self.lock:
            self.tick_count += 1
            now = self.tick_count
            for key, pod in list(self.pods.items()):
                meta = pod["metadata"]
                if "deleting_at" in meta and now - meta["deleting_at"] >= GRACE_TICKS:
                    del self.pods[key]
                    self.events.append(f"gone {key[0]}/{key[1]}")
            self._csi(now)
            self._kubelet(now)
            self._deployments()
            if self.healer_running and now % HEALER_TICKS == 0:
                self._healers(now)

    def _csi(self, now: int) -> None:
        for pod in list(self.pods.values()):
            node = pod["spec"]["nodeName"]
            claims = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod["spec"]["volumes"]}
            if not claims & {L2_CLAIM, fuse_check.CLAIM} or pod["status"]["phase"] != "Pending":
                continue
            if not _ready(self.nodes[node]) or node not in self.plugin_image:
                continue
            if self.fuse_of(node) is None:
                fuse = self.fuse_pod(node, self.plugin_image[node])
                _set_ready(fuse, False)
                fuse["status"]["started_at"] = now
                self.events.append(f"csi starts FUSE {node} {self.plugin_image[node]}")

    def _kubelet(self, now: int) -> None:
        for pod in self.pods.values():
            node = pod["spec"]["nodeName"]
            status = pod["status"]
            if not _ready(self.nodes[node]) or "deletionTimestamp" in pod["metadata"]:
                continue
            starting = "started_at" in status and not _ready(pod) and node not in self.fuse_never_answers
            if starting and now - status["started_at"] >= FUSE_READY_TICKS:
                _set_ready(pod, True)
            fuse = self.fuse_of(node)
            fuse_up = fuse is not None and _ready(fuse)
            if status["phase"] == "Pending" and fuse_up:
                if pod["metadata"]["name"].startswith(fuse_check.POD_PREFIX):
                    status["phase"] = "Succeeded"
                    self.events.append(f"check succeeds {node}")
                else:
                    status["phase"] = "Running"
                    status["ready_at"] = now + POD_READY_TICKS
            if status.get("ready_at") is not None and now >= status["ready_at"] and not _ready(pod):
                _set_ready(pod, True)

    def _deployments(self) -> None:
        for d in self.deployments:
            live = [
                p
                for p in self.pods.values()
                if p["metadata"]["namespace"] == d.namespace
                and (p["metadata"].get("ownerReferences") or [{}])[0].get("name") == d.name
                and "deletionTimestamp" not in p["metadata"]
            ]
            for _ in range(d.replicas - len(live)):
                targets = [
                    n
                    for n, body in sorted(self.nodes.items())
                    if _ready(body) and not body["spec"].get("unschedulable")
                ]
                if not targets:
                    return
                busy = {p["spec"]["nodeName"] for p in live}
                node = next((n for n in targets if n not in busy), targets[0])
                self._uid += 1
                pod = self.add_pod(d.namespace, f"{d.name}-r{self._uid}", node, labels=d.labels, owner=d.name,
                                   claim=L2_CLAIM if d.l2 else None, ready=False, phase="Pending")  # fmt: skip
                live.append(pod)
                self.events.append(f"schedule {d.namespace}/{pod['metadata']['name']} on {node}")

    def _healers(self, now: int) -> None:
        """Each node's healer, through the real script's API calls (l2_healer.Kube)."""
        kube = Kube(self.url, None, None, timeout_s=5)
        for node in sorted(self.nodes):
            fuse = self.fuse_of(node)
            if fuse is None or not _ready(fuse):
                continue  # down FUSE: the healer holds (fuse_down)
            since = fuse["metadata"]["creationTimestamp"]
            dead = [
                p
                for p in self.pods_of(node)
                if p["metadata"]["namespace"] != names.NAMESPACE
                and any(
                    (v.get("persistentVolumeClaim") or {}).get("claimName") == L2_CLAIM for v in p["spec"]["volumes"]
                )
                and p["metadata"]["creationTimestamp"] < since
                and "deletionTimestamp" not in p["metadata"]
            ]
            for pod in dead:
                meta = pod["metadata"]
                owner = f"{meta['namespace']}/{(meta.get('ownerReferences') or [{}])[0].get('name', meta['name'])}"
                if now - self._last_eviction.get(f"{node}:{owner}", -(10**9)) < ENDPOINT_TICKS:
                    continue
                try:
                    self.lock.release()  # the healer calls the API like any client
                    try:
                        kube.evict_pod(meta["namespace"], meta["name"], meta["uid"])
                    finally:
                        self.lock.acquire()
                except urllib.error.HTTPError as err:
                    if err.code == 429:
                        continue
                    raise
                self._last_eviction[f"{node}:{owner}"] = now
                self.events.append(f"healer restarts {meta['namespace']}/{meta['name']}")


@contextmanager
def fake_cluster(run: bool = True) -> Iterator[FakeCluster]:
    """The API on 127.0.0.1 and, with `run`, the controllers ticking every TICK_S; stopped on every path."""
    cluster = FakeCluster()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")) or 0)
            loaded = json.loads(raw or b"{}")
            return loaded if isinstance(loaded, dict) else {}

        def _status(self, code: int, reason: str) -> None:
            self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason,
                              "reason": reason, "code": code})  # fmt: skip

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            parts = url.path.strip("/").split("/")
            with cluster.lock:
                if parts[:3] == ["api", "v1", "nodes"]:
                    if len(parts) == 4:
                        found = cluster.nodes.get(parts[3])
                        self._send(200, found) if found else self._status(404, "NotFound")
                        return
                    selector = query.get("labelSelector", [""])[0]
                    items = [n for n in cluster.nodes.values() if _labels_match(selector, n["metadata"]["labels"])]
                    self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
                    return
                if parts[:3] == ["api", "v1", "pods"]:
                    self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                     "items": cluster.list_pods(None, query)})  # fmt: skip
                    return
                if parts[:3] == ["api", "v1", "namespaces"] and len(parts) >= 5 and parts[4] == "pods":
                    if len(parts) == 6:
                        found = cluster.pods.get((parts[3], parts[5]))
                        self._send(200, found) if found else self._status(404, "NotFound")
                        return
                    self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                     "items": cluster.list_pods(parts[3], query)})  # fmt: skip
                    return
            self._status(404, "NotFound")

        def do_PATCH(self) -> None:
            parts = urlparse(self.path).path.strip("/").split("/")
            body = self._body()
            with cluster.lock:
                node = cluster.nodes.get(parts[3]) if parts[:3] == ["api", "v1", "nodes"] else None
                if node is None:
                    self._status(404, "NotFound")
                    return
                _merge(node, body)
                unschedulable = bool(node["spec"].get("unschedulable"))
                cluster.events.append(f"{'cordon' if unschedulable else 'uncordon'} {parts[3]}")
                self._send(200, node)

        def do_POST(self) -> None:
            url = urlparse(self.path)
            parts = url.path.strip("/").split("/")
            body = self._body()
            with cluster.lock:
                if len(parts) == 7 and parts[6] == "eviction":
                    dry = "All" in parse_qs(url.query).get("dryRun", []) or bool(
                        (body.get("deleteOptions") or {}).get("dryRun")
                    )
                    code, reason = cluster.evict(parts[3], parts[5], dry)
                    self._send(code, {"kind": "Status", "code": code, "message": reason})
                    return
                if len(parts) == 5 and parts[4] == "pods":
                    meta = body["metadata"]
                    if (parts[3], meta["name"]) in cluster.pods:
                        self._status(409, "AlreadyExists")
                        return
                    pod = cluster.add_pod(parts[3], meta["name"], body["spec"]["nodeName"], labels=meta.get("labels"),
                                          claim=fuse_check.CLAIM, containers=body["spec"]["containers"], ready=False,
                                          phase="Pending")  # fmt: skip
                    pod["metadata"]["annotations"] = dict(meta.get("annotations") or {})
                    cluster.events.append(f"create {parts[3]}/{meta['name']}")
                    self._send(201, pod)
                    return
            self._status(404, "NotFound")

        def do_DELETE(self) -> None:
            parts = urlparse(self.path).path.strip("/").split("/")
            body = self._body()
            uid = (body.get("preconditions") or {}).get("uid")
            with cluster.lock:
                code = cluster.delete(parts[3], parts[5], uid)
            self._send(code, {"kind": "Status", "code": code}) if code == 200 else self._status(code, "Failure")

        def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cluster.url = f"http://127.0.0.1:{server.server_address[1]}"
    stop = threading.Event()

    def controllers() -> None:
        while not stop.wait(TICK_S):
            cluster.tick()

    ticker = threading.Thread(target=controllers, daemon=True)
    if run:
        ticker.start()
    try:
        yield cluster
    finally:
        stop.set()
        if run:
            ticker.join(timeout=10)
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
