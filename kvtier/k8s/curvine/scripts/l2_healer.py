#!/usr/bin/env python3
"""kvtier L2 healer: finds L2 mounts on its node left on a dead FUSE connection and evicts the pods that hold them.

Every L2 pod gets a bind mount of the node's one Curvine FUSE mount (curvine-csi node_standalone.go `mount --bind`).
When the FUSE process dies, those bind mounts stay behind on its dead connection (they answer ENOTCONN), and LMCache
carries on with zero L2 without an error. The healer never opens any of them, nor anything of another pod: it reads
only the node's mount table (--mountinfo, the host's /proc/1/mountinfo, read-only) and compares, for each pod's
Curvine volume (`<pods-dir>/<pod uid>/volumes/kubernetes.io~csi/<pv>/mount`, type --fstype), its FUSE connection
(the mount's major:minor) with the connection of the node's FUSE mount now (the topmost mount of type --fstype under
--fuse-dir, where curvine-csi's FUSE pod mounts). A bind mount whose connection is no longer the node's is dead: the
FUSE it came from was restarted or unmounted, and only a new pod gets the live one (docs/references.md "Issue 22").
Every --interval-seconds it:
  - heals only a dead mount (--dead-checks checks in a row). A master outage or a slow worker does not change the
    connection: FUSE recovers from those by itself, so they never lead to a restart;
  - checks the Curvine master (any --master-url answers /api/overview) and this node's FUSE (--fuse-health-url
    answers) whenever the node has L2 mounts: either down is reported (not Ready), and when a mount is dead the
    healer holds, because a new pod would not get a working mount either;
  - holds too when more than --brake-share of the healers (at least --brake-min-nodes) report at once (their
    readiness, --healer-namespace/--healer-selector): a fleet-wide failure is not a node's to heal;
  - evicts (an Eviction API dry run, so PodDisruptionBudgets apply, then a delete the API server admits only for
    pods that hold the L2 claim) only pods that hold claim --claim in the --namespace namespaces and those that
    match --namespace-selector (looked up at each eviction, so a new LOB needs no new argument), at most one per
    endpoint (the pod's controller) per --endpoint-interval-seconds; a namespace it cannot list is reported and the
    others are still healed.
/readyz answers 503 while a mount on the node is dead, the master or the node's FUSE does not answer, or the healer
holds (what `kvtier verify` reports), /healthz 503 when the loop itself stopped, /metrics the kvtier_l2_healer_*
series. One JSON line per check that found something. --once: one check, then exit (tests).
Exit 0 done, 2 bad arguments or an unreadable --mountinfo, 3 the Kubernetes API could not be reached (--once).

Runs on the Python 3.9 of the Curvine runtime image (Rocky Linux 9): standard library only, no 3.10+ syntax.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

CSI_DIR = "kubernetes.io~csi"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
EXIT_OK, EXIT_USAGE, EXIT_NO_API = 0, 2, 3
HELD_REASONS = ("master_down", "fuse_down", "brake")
CHECKED = ("master", "fuse")
MOUNTINFO_MAX_BYTES = 64 << 20  # a node's mount table is far smaller; never read without a bound


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/<pid>/mountinfo (Linux Documentation/filesystems/proc.rst): `dev` is major:minor, the
    st_dev of the file system; for FUSE the number of its connection, shared by every bind mount of it."""

    mount_id: int
    parent_id: int
    dev: str
    mount_point: str
    fstype: str


@dataclass(frozen=True)
class Mount:
    pod_uid: str
    volume: str  # the PersistentVolume's name
    path: str
    dev: str  # its FUSE connection (major:minor)


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as backslash + three octal digits."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[MountEntry]:
    entries: list[MountEntry] = []
    for line in text.splitlines():
        head, separator, tail = line.partition(" - ")  # optional fields end with a lone "-"
        fields, rest = head.split(), tail.split()
        if not separator or len(fields) < 5 or not rest or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        entries.append(MountEntry(int(fields[0]), int(fields[1]), fields[2], _unescape(fields[4]), rest[0]))
    return entries


def read_mountinfo(path: str) -> list[MountEntry]:
    with Path(path).open("rb") as f:
        data = f.read(MOUNTINFO_MAX_BYTES + 1)
    if len(data) > MOUNTINFO_MAX_BYTES:
        raise OSError(f"{path} is larger than {MOUNTINFO_MAX_BYTES} bytes")
    return parse_mountinfo(data.decode("utf-8", errors="replace"))


def l2_mounts(entries: list[MountEntry], pods_dir: str, fstype: str) -> list[Mount]:
    """The pods' Curvine volumes: mounts of type `fstype` at the kubelet's CSI target path of a pod,
    `<pods-dir>/<pod uid>/volumes/kubernetes.io~csi/<pv>/mount` (kubernetes pkg/volume/csi csi_mounter.go)."""
    prefix = pods_dir.rstrip("/") + "/"
    found: list[Mount] = []
    for entry in entries:
        if entry.fstype != fstype or not entry.mount_point.startswith(prefix):
            continue
        parts = entry.mount_point[len(prefix) :].split("/")
        if len(parts) == 5 and parts[1:3] == ["volumes", CSI_DIR] and parts[4] == "mount":
            found.append(Mount(parts[0], parts[3], entry.mount_point, entry.dev))
    return sorted(found, key=lambda m: m.path)


def live_connections(entries: list[MountEntry], fuse_dir: str, fstype: str) -> set[str]:
    """The connections of the node's FUSE mounts now: at each mount point under `fuse_dir` the topmost mount (the
    one no other mount at that point sits on: a FUSE started again over a dead mount stacks on it), if of `fstype`."""
    prefix = fuse_dir.rstrip("/") + "/"
    stacks: dict[str, list[MountEntry]] = {}
    for entry in entries:
        if entry.mount_point.startswith(prefix):
            stacks.setdefault(entry.mount_point, []).append(entry)
    live: set[str] = set()
    for stack in stacks.values():
        covered = {e.parent_id for e in stack}
        live.update(e.dev for e in stack if e.mount_id not in covered and e.fstype == fstype)
    return live


def answers(url: str, timeout_s: float) -> bool:
    """Whether an HTTP GET of `url` answers 2xx within timeout_s (Curvine's /api/overview, FUSE's /healthz)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return 200 <= int(response.status) < 300
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors; a timeout too
        return False


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

    def list_pods(self, namespace: str, **selectors: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode(selectors)
        items = self.call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}").get("items", [])
        return [i for i in items if isinstance(i, dict)]

    def namespaces(self, label_selector: str) -> list[str]:
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        items = self.call("GET", f"/api/v1/namespaces?{query}").get("items", [])
        return sorted(str(i.get("metadata", {}).get("name")) for i in items if isinstance(i, dict))

    def pods_on_node(self, namespace: str, node: str) -> list[dict[str, Any]]:
        return self.list_pods(namespace, fieldSelector=f"spec.nodeName={node}")

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Ask the Eviction API (policy/v1, dry run) whether a PodDisruptionBudget allows it (429: not now), then
        delete the pod: the API server's ValidatingAdmissionPolicy sees the pod on a DELETE and lets the healer
        delete only pods that hold the L2 claim; on an eviction it would see only the Eviction object, so the
        policy admits the healer's evictions as dry runs only (docs/l2.md "Least privilege"). The uid precondition:
        never the pod's replacement if it already carries the same name."""
        preconditions = {"uid": uid}
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"dryRun": ["All"], "preconditions": preconditions},
        }
        self.call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction?dryRun=All", eviction)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", options)


def uses_claim(pod: dict[str, Any], claim: str) -> bool:
    volumes = pod.get("spec", {}).get("volumes", []) or []
    return any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim for v in volumes)


def endpoint_of(pod: dict[str, Any]) -> str:
    """What the per-endpoint rate limit counts: the pod's controller (its ReplicaSet or LeaderWorkerSet), else its
    name."""
    meta = pod.get("metadata", {})
    for owner in meta.get("ownerReferences", []) or []:
        if owner.get("controller"):
            return f"{meta.get('namespace')}/{owner.get('kind')}/{owner.get('name')}"
    return f"{meta.get('namespace')}/Pod/{meta.get('name')}"


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@dataclass
class Healer:
    kube: Kube
    node: str
    namespaces: list[str]
    claim: str
    mountinfo: str
    pods_dir: str
    fuse_dir: str
    fstype: str
    master_urls: list[str]
    fuse_health_url: str
    dead_checks: int = 2
    endpoint_interval_s: float = 300.0
    brake_share: float = 0.3
    brake_min_nodes: int = 2
    healer_namespace: str = ""
    healer_selector: str = ""
    health_timeout_s: float = 3.0
    namespace_selector: str = ""
    dry_run: bool = False
    clock: Callable[[], float] = time.monotonic
    dead_counts: dict[str, int] = field(default_factory=dict)
    last_eviction: dict[str, float] = field(default_factory=dict)
    ready: bool = True
    last_check: float = 0.0
    held: str | None = None
    down: set[str] = field(default_factory=set)  # of CHECKED, at the last check
    states: dict[str, str] = field(default_factory=dict)
    evictions_total: int = 0
    namespace_errors_total: int = 0

    def check(self) -> dict[str, Any]:
        """One look at the node's mount table; evicts the pods of dead mounts when it is safe to."""
        report: dict[str, Any] = {"node": self.node, "evicted_pods": [], "dry_run": self.dry_run}
        try:
            entries = read_mountinfo(self.mountinfo)
        except OSError as err:  # nothing is known: report, act on nothing
            report["mountinfo_error"] = str(err)
            self.held, self.ready, self.last_check = None, False, time.time()
            return report
        mounts = l2_mounts(entries, self.pods_dir, self.fstype)
        live = live_connections(entries, self.fuse_dir, self.fstype)
        states = {
            m.path: "ok" if m.dev in live else f"dead: connection {m.dev} is not the node's FUSE mount" for m in mounts
        }
        self.states = states
        for path in list(self.dead_counts):
            if not states.get(path, "").startswith("dead"):
                del self.dead_counts[path]
        dead: list[Mount] = []
        for mount in mounts:
            if states[mount.path].startswith("dead"):
                self.dead_counts[mount.path] = self.dead_counts.get(mount.path, 0) + 1
                if self.dead_counts[mount.path] >= self.dead_checks:
                    dead.append(mount)
        # A node without L2 pods has nothing to report (curvine-csi starts its FUSE pod with the first L2 volume).
        self.down = self._down() if mounts else set()
        report.update(
            mounts=len(mounts),
            live_connections=sorted(live),
            dead_mounts={m.path: states[m.path] for m in mounts if states[m.path] != "ok"},
        )
        if self.down:
            report["down"] = sorted(self.down)
        self.held = self._hold_reason(report) if dead else None
        if dead and self.held is None:
            self._evict_pods_of(dead, report)
        if self.held is not None:
            report["held"] = self.held
        self.ready = self.held is None and not self.down and all(s == "ok" for s in states.values())
        self.last_check = time.time()
        return report

    def _down(self) -> set[str]:
        down: set[str] = set()
        if not any(answers(f"{url.rstrip('/')}/api/overview", self.health_timeout_s) for url in self.master_urls):
            down.add("master")
        if not answers(self.fuse_health_url, self.health_timeout_s):
            down.add("fuse")
        return down

    def _hold_reason(self, report: dict[str, Any]) -> str | None:
        """Why evicting now would not help (a down master or FUSE: the new pod gets no working mount either), or
        would hurt (a fleet-wide failure)."""
        if "master" in self.down:
            return "master_down"
        if "fuse" in self.down:
            return "fuse_down"
        if self.healer_namespace and self.healer_selector:
            try:
                healers = self.kube.list_pods(self.healer_namespace, labelSelector=self.healer_selector)
            except (OSError, ValueError) as err:
                report["brake_error"] = str(err)
                return "brake"  # cannot tell how many nodes report: do nothing
            reporting = sum(1 for pod in healers if not is_ready(pod))
            report["healers_reporting"] = f"{reporting}/{len(healers)}"
            if reporting >= self.brake_min_nodes and reporting > self.brake_share * len(healers):
                return "brake"
        return None

    def _evict_pods_of(self, mounts: list[Mount], report: dict[str, Any]) -> None:
        uids = {m.pod_uid for m in mounts}
        errors: dict[str, str] = {}
        namespaces = list(self.namespaces)
        if self.namespace_selector:  # the LOB namespaces as they are now: a new LOB needs no change here
            try:
                namespaces += [n for n in self.kube.namespaces(self.namespace_selector) if n not in namespaces]
            except (OSError, ValueError) as err:
                errors["(namespaces)"] = str(err)
                self.namespace_errors_total += 1
        for namespace in namespaces:
            try:
                pods = self.kube.pods_on_node(namespace, self.node)
            except (OSError, ValueError) as err:  # one namespace (a missing Role, a stale entry) stops no other
                errors[namespace] = str(err)
                self.namespace_errors_total += 1
                continue
            for pod in pods:
                meta = pod.get("metadata", {})
                uid = meta.get("uid")
                if uid not in uids or meta.get("deletionTimestamp") or not uses_claim(pod, self.claim):
                    continue
                name, endpoint = f"{namespace}/{meta.get('name')}", endpoint_of(pod)
                now = self.clock()
                if now - self.last_eviction.get(endpoint, -1e18) < self.endpoint_interval_s:
                    report.setdefault("rate_limited", []).append(name)
                    continue
                if not self.dry_run:
                    try:
                        self.kube.evict_pod(namespace, str(meta.get("name")), str(uid))
                    except urllib.error.HTTPError as err:
                        if err.code == 429:  # a PodDisruptionBudget says not now: next check
                            report.setdefault("blocked_by_pdb", []).append(name)
                            continue
                        if err.code not in (404, 409):  # gone already, or replaced (uid precondition)
                            errors[namespace] = str(err)
                            continue
                    except (OSError, ValueError) as err:
                        errors[namespace] = str(err)
                        continue
                    self.last_eviction[endpoint] = now
                    self.evictions_total += 1
                report["evicted_pods"].append(name)
        if errors:
            report["namespace_errors"] = errors

    def metrics(self) -> str:
        counts = dict.fromkeys(("ok", "dead"), 0)
        for state in self.states.values():
            counts["ok" if state == "ok" else "dead"] += 1
        lines = [
            "# HELP kvtier_l2_healer_mounts L2 mounts on this node at the last check (dead = not on the node's FUSE).",
            "# TYPE kvtier_l2_healer_mounts gauge",
            *(f'kvtier_l2_healer_mounts{{node="{self.node}",state="{s}"}} {n}' for s, n in counts.items()),
            "# HELP kvtier_l2_healer_down 1 while the Curvine master or this node's FUSE does not answer.",
            "# TYPE kvtier_l2_healer_down gauge",
            *(f'kvtier_l2_healer_down{{node="{self.node}",target="{t}"}} {int(t in self.down)}' for t in CHECKED),
            "# HELP kvtier_l2_healer_held 1 while the healer holds back (master or FUSE down, fleet brake).",
            "# TYPE kvtier_l2_healer_held gauge",
            *(f'kvtier_l2_healer_held{{node="{self.node}",reason="{r}"}} {int(self.held == r)}' for r in HELD_REASONS),
            "# HELP kvtier_l2_healer_evictions_total Pods the healer evicted.",
            "# TYPE kvtier_l2_healer_evictions_total counter",
            f'kvtier_l2_healer_evictions_total{{node="{self.node}"}} {self.evictions_total}',
            "# HELP kvtier_l2_healer_namespace_errors_total LOB namespaces the healer could not list or evict in.",
            "# TYPE kvtier_l2_healer_namespace_errors_total counter",
            f'kvtier_l2_healer_namespace_errors_total{{node="{self.node}"}} {self.namespace_errors_total}',
        ]
        return "\n".join(lines) + "\n"


def _not_ready(healer: Healer) -> str:
    if healer.down:
        return " and ".join(f"the {t} does not answer" for t in sorted(healer.down)) + "\n"
    return "an L2 mount on this node is on a dead FUSE connection (or the mount table is unreadable)\n"


def serve(healer: Healer, host: str, port: int, stale_after_s: float) -> ThreadingHTTPServer:
    started = time.time()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fresh = time.time() - (healer.last_check or started) <= stale_after_s
            if self.path == "/healthz":
                self._reply(200 if fresh else 503, "ok\n" if fresh else "no check recently\n")
            elif self.path == "/readyz":
                ok = fresh and healer.ready
                reason = f"holding: {healer.held}\n" if healer.held else _not_ready(healer)
                self._reply(200 if ok else 503, "ok\n" if ok else reason)
            elif self.path == "/metrics":
                self._reply(200, healer.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            else:
                self._reply(404, "not found\n")

        def _reply(self, status: int, body: str, content_type: str = "text/plain") -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
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
    parser.add_argument("--namespace", action="append", default=[], help="a namespace whose L2 pods may be evicted")
    parser.add_argument("--namespace-selector", default="", help="also every namespace with this label selector")
    parser.add_argument("--claim", default="l2-cache", help="the L2 claim a pod must use to be evicted")
    parser.add_argument("--mountinfo", default="/proc/1/mountinfo", help="the node's mount table (read only)")
    parser.add_argument("--pods-dir", default="/var/lib/kubelet/pods", help="as the node names it (never opened)")
    parser.add_argument("--fuse-dir", default="/var/lib/kubelet/plugins/curvine", help="where the node's FUSE mounts")
    parser.add_argument("--fstype", default="fuse.curvinefs", help="the FUSE mounts' type in the mount table")
    parser.add_argument("--interval-seconds", type=float, default=15.0)
    parser.add_argument("--dead-checks", type=int, default=2, help="checks in a row a mount must be dead")
    parser.add_argument("--master-url", action="append", default=[], help="a Curvine master's web URL (repeat)")
    parser.add_argument("--fuse-health-url", default="", help="this node's Curvine FUSE /healthz URL")
    parser.add_argument("--health-timeout-seconds", type=float, default=3.0)
    parser.add_argument("--endpoint-interval-seconds", type=float, default=300.0, help="per endpoint, per node")
    parser.add_argument("--brake-share", type=float, default=0.3, help="hold when more healers than this report")
    parser.add_argument("--brake-min-nodes", type=int, default=2)
    parser.add_argument("--healer-namespace", default="", help="where the healers run (for the brake)")
    parser.add_argument("--healer-selector", default="", help="the healers' label selector (for the brake)")
    parser.add_argument("--api-url", default=None, help="default: https://$KUBERNETES_SERVICE_HOST:$..._PORT")
    parser.add_argument("--token-file", default=f"{SERVICE_ACCOUNT}/token")
    parser.add_argument("--ca-file", default=f"{SERVICE_ACCOUNT}/ca.crt")
    parser.add_argument("--health-port", type=int, default=None)
    parser.add_argument("--health-host", default="0.0.0.0")  # the pod's own network namespace
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="report, evict nothing")
    args = parser.parse_args(argv)
    if not args.node:
        parser.error("--node (or NODE_NAME) is required")
    if not args.master_url or not all(args.master_url) or not args.fuse_health_url:
        parser.error("--master-url and --fuse-health-url are required: the healer never acts without checking them")
    positive = ("interval_seconds", "health_timeout_seconds")
    if any(getattr(args, name) <= 0 for name in positive) or args.endpoint_interval_seconds < 0:
        parser.error("--interval-seconds and --health-timeout-seconds must be positive")
    if not args.fstype or not args.pods_dir.startswith("/") or not args.fuse_dir.startswith("/"):
        parser.error("--fstype must be set, --pods-dir and --fuse-dir must be absolute paths")
    if args.dead_checks < 1 or args.brake_min_nodes < 1 or not 0 < args.brake_share <= 1:
        parser.error("--dead-checks and --brake-min-nodes must be at least 1, --brake-share in (0, 1]")
    if args.health_port is not None and not 0 <= args.health_port <= 65535:
        parser.error(f"--health-port {args.health_port} is not a TCP port (0-65535)")
    if args.api_url is None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            parser.error("--api-url is required outside a pod (no KUBERNETES_SERVICE_HOST)")
        args.api_url = f"https://{host}:{port}"
    return args


def build(args: argparse.Namespace) -> Healer:
    token = args.token_file if args.token_file and Path(args.token_file).exists() else None
    ca = args.ca_file if args.ca_file and Path(args.ca_file).exists() else None
    return Healer(
        Kube(args.api_url, token, ca),
        args.node,
        list(args.namespace),
        args.claim,
        args.mountinfo,
        args.pods_dir,
        args.fuse_dir,
        args.fstype,
        list(args.master_url),
        args.fuse_health_url,
        dead_checks=args.dead_checks,
        endpoint_interval_s=args.endpoint_interval_seconds,
        brake_share=args.brake_share,
        brake_min_nodes=args.brake_min_nodes,
        healer_namespace=args.healer_namespace,
        healer_selector=args.healer_selector,
        health_timeout_s=args.health_timeout_seconds,
        namespace_selector=args.namespace_selector,
        dry_run=args.dry_run,
    )


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    try:
        read_mountinfo(args.mountinfo)
    except OSError as err:
        print(
            f"l2_healer: --mountinfo {args.mountinfo}: {err.strerror or err}; mount the node's /proc/1/mountinfo there "
            'read-only (docs/l2.md "Least privilege")',
            file=sys.stderr,
        )
        return EXIT_USAGE
    healer = build(args)
    stop = stop or threading.Event()
    server = None
    if args.health_port is not None:
        server = serve(healer, args.health_host, args.health_port, 5 * args.interval_seconds + 60)
    try:
        while True:
            report = healer.check()
            keys = ("dead_mounts", "evicted_pods", "namespace_errors", "down", "held", "mountinfo_error")
            if args.once or any(report.get(key) for key in keys):
                print(json.dumps(report, sort_keys=True), flush=True)
            errors = report.get("namespace_errors") or {}
            if args.once and errors and not report["evicted_pods"] and len(errors) >= len(args.namespace):
                return EXIT_NO_API  # not one namespace answered
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
