#!/usr/bin/env python3
"""kvtier L2 healer: finds L2 mounts on its node that no longer answer and deletes the pods that hold them.

Every L2 pod gets a bind mount of the node's one Curvine FUSE mount (curvine-csi node_standalone.go). When the FUSE
process dies or restarts, those bind mounts stay behind, dead (ENOTCONN), and LMCache carries on with zero L2
without an error (its fs connector treats OSError as a miss). Every --interval-seconds this looks at each Curvine CSI
volume the kubelet mounted for a pod on this node (`<pods-dir>/<pod uid>/volumes/kubernetes.io~csi/<pv>/mount`, the
driver named in the kubelet's `vol_data.json`), stats it and opens it with a timeout, and:
  - a dead mount (ENOTCONN, ECONNABORTED, ESTALE, ENODEV, EIO): deletes the pod (by uid) if it lives in one of the
    --namespace namespaces and has a volume of claim --claim; its controller recreates it, with a fresh mount;
  - a mount that does not answer within --stat-timeout-seconds for --hung-checks checks in a row: the same;
  - /readyz answers 503 while any mount on the node is dead or hung (what `kvtier verify` reports), /healthz 503
    when the loop itself stopped.
Prints one JSON line per check that found something. --once: one check, then exit (tests).
Exit 0 done, 2 bad arguments, 3 the Kubernetes API could not be reached (--once).

Runs on the Python 3.9 of the Curvine runtime image (Rocky Linux 9): standard library only, no 3.10+ syntax.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DEAD_ERRNOS = frozenset({errno.ENOTCONN, errno.ECONNABORTED, errno.ESTALE, errno.ENODEV, errno.EIO})
CSI_DIR = "kubernetes.io~csi"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
EXIT_OK, EXIT_USAGE, EXIT_NO_API = 0, 2, 3


@dataclass(frozen=True)
class Mount:
    pod_uid: str
    volume: str  # the PersistentVolume's name
    path: str


def find_mounts(pods_dir: str, driver: str) -> list[Mount]:
    """The CSI volumes of `driver` the kubelet set up for pods on this node (kubelet pkg/volume/csi: vol_data.json
    next to each `mount` directory names the driver and the PV)."""
    found: list[Mount] = []
    root = Path(pods_dir)
    for data_file in sorted(root.glob(f"*/volumes/{CSI_DIR}/*/vol_data.json")):
        try:
            data = json.loads(data_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a volume being set up or torn down
        if not isinstance(data, dict) or data.get("driverName") != driver:
            continue
        pod_uid = data_file.relative_to(root).parts[0]
        volume = str(data.get("specVolID") or data_file.parent.name)
        found.append(Mount(pod_uid, volume, str(data_file.parent / "mount")))
    return found


def check_mount(path: str, timeout_s: float) -> str:
    """'ok', 'gone' (torn down meanwhile), 'hung', or 'dead: <errno name>'. stat alone may be answered from the
    kernel's attribute cache, so the directory is opened too (a FUSE OPENDIR always reaches the daemon)."""
    outcome: dict[str, str] = {}

    def probe() -> None:
        try:
            Path(path).stat()
            with os.scandir(path) as entries:
                next(entries, None)
            outcome["status"] = "ok"
        except FileNotFoundError:
            outcome["status"] = "gone"
        except OSError as err:
            if err.errno in DEAD_ERRNOS:
                outcome["status"] = f"dead: {errno.errorcode.get(err.errno or 0, err.errno)}"
            else:
                outcome["status"] = f"error: {err}"

    worker = threading.Thread(target=probe, name=f"stat {path}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return "hung" if worker.is_alive() else outcome.get("status", "hung")


class Kube:
    """The few Kubernetes API calls the healer makes, with the pod's service account."""

    def __init__(self, base_url: str, token_file: str | None, ca_file: str | None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_file = token_file
        self.timeout_s = timeout_s
        self.context = ssl.create_default_context(cafile=ca_file) if base_url.startswith("https") else None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if self.token_file:
            # Re-read every time: projected service-account tokens are rotated by the kubelet.
            headers["Authorization"] = "Bearer " + Path(self.token_file).read_text(encoding="utf-8").strip()
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as response:
            loaded = json.loads(response.read().decode("utf-8") or "{}")
        return loaded if isinstance(loaded, dict) else {}

    def pods_on_node(self, namespace: str, node: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}"})
        items = self.call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}").get("items", [])
        return [i for i in items if isinstance(i, dict)]

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        # The uid precondition: never the pod's replacement if it already carries the same name.
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", options)


def uses_claim(pod: dict[str, Any], claim: str) -> bool:
    volumes = pod.get("spec", {}).get("volumes", []) or []
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes)


@dataclass
class Healer:
    kube: Kube
    node: str
    namespaces: list[str]
    claim: str
    pods_dir: str
    driver: str
    stat_timeout_s: float
    hung_checks: int
    dry_run: bool = False
    hung_counts: dict[str, int] = field(default_factory=dict)
    ready: bool = True
    last_check: float = 0.0

    def check(self) -> dict[str, Any]:
        """One look at every L2 mount on the node; deletes the pods of dead ones. Raises OSError when the API is
        needed and does not answer (nothing is deleted then)."""
        mounts = find_mounts(self.pods_dir, self.driver)
        states = {m.path: check_mount(m.path, self.stat_timeout_s) for m in mounts}
        for path in list(self.hung_counts):
            if states.get(path) != "hung":
                del self.hung_counts[path]
        broken: list[tuple[Mount, str]] = []
        for mount in mounts:
            state = states[mount.path]
            if state == "hung":
                self.hung_counts[mount.path] = self.hung_counts.get(mount.path, 0) + 1
                if self.hung_counts[mount.path] >= self.hung_checks:
                    broken.append((mount, f"hung for {self.hung_counts[mount.path]} checks"))
            elif state.startswith(("dead", "error")):
                broken.append((mount, state))
        # Other errors (EACCES, ...) are reported, not healed: a new pod would get the same mount.
        to_heal = [m for m, state in broken if not state.startswith("error")]
        deleted = self._delete_pods_of(to_heal) if to_heal else []
        self.ready = all(states[m.path] in ("ok", "gone") for m in mounts)
        self.last_check = time.time()
        return {
            "node": self.node,
            "mounts": len(mounts),
            "not_answering": {m.path: states[m.path] for m in mounts if states[m.path] not in ("ok", "gone")},
            "deleted_pods": deleted,
            "dry_run": self.dry_run,
        }

    def _delete_pods_of(self, mounts: list[Mount]) -> list[str]:
        uids = {m.pod_uid for m in mounts}
        deleted: list[str] = []
        for namespace in self.namespaces:
            for pod in self.kube.pods_on_node(namespace, self.node):
                meta = pod.get("metadata", {})
                uid = meta.get("uid")
                if uid not in uids or meta.get("deletionTimestamp") or not uses_claim(pod, self.claim):
                    continue
                name = str(meta.get("name"))
                if not self.dry_run:
                    try:
                        self.kube.delete_pod(namespace, name, str(uid))
                    except urllib.error.HTTPError as err:
                        if err.code not in (404, 409):  # gone already, or replaced (uid precondition)
                            raise
                deleted.append(f"{namespace}/{name}")
        return deleted


def serve(healer: Healer, host: str, port: int, stale_after_s: float) -> ThreadingHTTPServer:
    started = time.time()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fresh = time.time() - (healer.last_check or started) <= stale_after_s
            if self.path == "/healthz":
                self._reply(200 if fresh else 503, "ok\n" if fresh else "no check recently\n")
            elif self.path == "/readyz":
                ok = fresh and healer.ready
                self._reply(200 if ok else 503, "ok\n" if ok else "an L2 mount on this node does not answer\n")
            else:
                self._reply(404, "not found\n")

        def _reply(self, status: int, body: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", ""), help="this node (default: $NODE_NAME)")
    parser.add_argument("--namespace", action="append", default=[], help="a namespace whose L2 pods may be deleted")
    parser.add_argument("--claim", default="l2-cache", help="the L2 claim a pod must use to be deleted")
    parser.add_argument("--pods-dir", default="/var/lib/kubelet/pods")
    parser.add_argument("--driver", default="curvine")
    parser.add_argument("--interval-seconds", type=float, default=15.0)
    parser.add_argument("--stat-timeout-seconds", type=float, default=5.0)
    parser.add_argument("--hung-checks", type=int, default=3)
    parser.add_argument("--api-url", default=None, help="default: https://$KUBERNETES_SERVICE_HOST:$..._PORT")
    parser.add_argument("--token-file", default=f"{SERVICE_ACCOUNT}/token")
    parser.add_argument("--ca-file", default=f"{SERVICE_ACCOUNT}/ca.crt")
    parser.add_argument("--health-port", type=int, default=None)
    parser.add_argument("--health-host", default="0.0.0.0")  # the pod's own network namespace
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    args = parser.parse_args(argv)
    if not args.node:
        parser.error("--node (or NODE_NAME) is required")
    if args.interval_seconds <= 0 or args.stat_timeout_seconds <= 0 or args.hung_checks < 1:
        parser.error("--interval-seconds and --stat-timeout-seconds must be positive, --hung-checks at least 1")
    if args.api_url is None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            parser.error("--api-url is required outside a pod (no KUBERNETES_SERVICE_HOST)")
        args.api_url = f"https://{host}:{port}"
    return args


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    token = args.token_file if args.token_file and Path(args.token_file).exists() else None
    ca = args.ca_file if args.ca_file and Path(args.ca_file).exists() else None
    healer = Healer(
        Kube(args.api_url, token, ca),
        args.node,
        list(args.namespace),
        args.claim,
        args.pods_dir,
        args.driver,
        args.stat_timeout_seconds,
        args.hung_checks,
        dry_run=args.dry_run,
    )
    stop = stop or threading.Event()
    server = None
    if args.health_port is not None:
        server = serve(healer, args.health_host, args.health_port, 5 * args.interval_seconds + 60)
    try:
        while True:
            try:
                report = healer.check()
                if report["not_answering"] or report["deleted_pods"] or args.once:
                    print(json.dumps(report, sort_keys=True), flush=True)
            except (OSError, ValueError) as err:  # the API did not answer: try again next time
                healer.ready = False
                print(json.dumps({"node": args.node, "error": f"Kubernetes API: {err}"}), file=sys.stderr, flush=True)
                if args.once:
                    return EXIT_NO_API
            if args.once or stop.wait(args.interval_seconds):
                return EXIT_OK
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
