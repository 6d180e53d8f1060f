"""network-config-analyzer (IBM np-guard, PyPI 2.1.0, .venv-nca) over an environment's rendered objects, and the
connectivity table it computes.

What nca is fed (its blind spots, each modelled here, named):
- one object per file, and only Namespaces, NetworkPolicies and workloads cut to what connectivity depends on (name,
  namespace, labels, container ports): nca skips a whole file that contains `{{` (kvtier's script ConfigMaps and some
  pod arguments do);
- every Namespace carries `kubernetes.io/metadata.name` (the API server sets it; kvtier's policies select on it);
- what kvtier does not render but the cluster runs, with the labels assumed:
  - kube-dns: pods `k8s-app=kube-dns` in `kube-system` (EKS's CoreDNS add-on);
  - the operator's router pods: `app=<endpoint>-<LOB namespace>-router` in `hyperpod-inference-system`, port 8081
    (kvtier.k8s.endpoint_names, the label kvtier's Service selects);
  - the operator's engine pods: `app=<endpoint>` in the LOB namespace, port 8000 (what kvtier's Kyverno policy and
    the LOB policies select);
  - a client namespace that is no LOB's (`clients`), and a metrics scraper (`monitoring`, labelled
    `kvtier.io/metrics-scraper=true`);
  - a second master and a second worker (Pods with the StatefulSet's and the DaemonSet's labels): nca prints no
    connection of a workload to itself, so replica-to-replica traffic (Raft, worker to worker) needs two;
- host networking, which nca does not know: the FUSE pods are their nodes' addresses (`FUSE_NODES`), and the fence's
  per-node policies for those nodes are rendered by the fence's own code (kvtier/k8s/curvine/scripts/l2_fence.py).
  nca treats `ipBlock`s as disjoint from pods: that a /32 fence address is no pod's is tests/k8s/curvine/test_policies.py.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.curvine.policies import FENCE_PREFIX, fence_args
from kvtier.k8s.curvine.scripts import l2_fence
from kvtier.k8s.endpoint_names import (
    ENGINE_PORT,
    OPERATOR_NAMESPACE,
    OPERATOR_ROUTER_PORT,
    operator_router_pod_label,
)
from kvtier.k8s.isolation import METRICS_SCRAPER_LABEL
from kvtier.naming import lob_namespace

ROOT = Path(__file__).resolve().parents[2]
NCA = ROOT / ".venv-nca" / "bin" / "nca"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod", "ReplicaSet")
FUSE_NODES = ("10.250.0.11", "10.250.0.12")  # two GPU nodes' primary addresses (host-network FUSE pods)
CLIENTS, SCRAPERS = "clients", "monitoring"
OUTSIDE = "52.216.0.10"  # an S3 address (the gateway endpoint's prefix list), i.e. anything beyond the VPC


def _skeleton(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What nca reads of a workload: name, namespace, pod labels, container ports; None for host-network pods."""
    spec = obj.get("spec", {})
    pod = obj if obj["kind"] == "Pod" else spec.get("template", {})
    pod_spec = pod.get("spec", {})
    if pod_spec.get("hostNetwork"):
        return None
    containers = [
        {"name": c["name"], "image": "x", "ports": [{"containerPort": p["containerPort"]} for p in c.get("ports", [])]}
        for c in pod_spec.get("containers", [])
    ]
    labels = dict(pod.get("metadata", {}).get("labels", {}) or {})
    meta = {"name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace", "default")}
    if obj["kind"] == "Pod":
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, "labels": labels},
            "spec": {"containers": containers},
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment" if obj["kind"] in ("Job", "ReplicaSet") else obj["kind"],
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
        },
    }


def _namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}},
    }


def _pod(namespace: str, name: str, labels: dict[str, str], ports: Iterable[int] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": p} for p in ports]}]},
    }


@dataclass
class Modelled:
    """The objects fed to nca, and which endpoints are what (names as nca prints them: `ns/name[Kind]`)."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    lob_of: dict[str, str] = field(default_factory=dict)  # endpoint -> LOB, for every pod a LOB runs (any namespace)
    operator_routers: dict[tuple[str, str], str] = field(default_factory=dict)  # (lob, endpoint) -> router pod
    operator_engines: dict[tuple[str, str], str] = field(default_factory=dict)


def endpoint_name(obj: dict[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}[{obj['kind']}]"


def model(rendered: list[dict[str, Any]], operator_endpoints: dict[str, list[str]]) -> Modelled:
    """`rendered`: every object of the environment; `operator_endpoints`: LOB -> its operator-mode endpoints."""
    out = Modelled()
    namespaces = {o["metadata"]["name"]: o for o in rendered if o["kind"] == "Namespace"}
    extra = {
        "kube-system": {},
        OPERATOR_NAMESPACE: {},
        CLIENTS: {},
        SCRAPERS: {METRICS_SCRAPER_LABEL: "true"},
        curvine.NAMESPACE: {},
    }
    for name, labels in extra.items():
        if name not in namespaces:
            out.objects.append(_namespace(name, labels))
    for name, ns in namespaces.items():
        out.objects.append(_namespace(name, ns["metadata"].get("labels")))
    lob_namespaces = {
        n: ns["metadata"]["labels"]["kvtier.io/line-of-business"]
        for n, ns in namespaces.items()
        if "kvtier.io/line-of-business" in (ns["metadata"].get("labels") or {})
    }
    for obj in rendered:
        if obj["kind"] == "NetworkPolicy":
            out.objects.append(obj)
        elif obj["kind"] in WORKLOADS:
            skeleton = _skeleton(obj)
            if skeleton is None:
                continue
            out.objects.append(skeleton)
            if skeleton["metadata"]["namespace"] in lob_namespaces:
                out.lob_of[endpoint_name(skeleton)] = lob_namespaces[skeleton["metadata"]["namespace"]]
    out.objects.append(_pod("kube-system", "coredns", {"k8s-app": "kube-dns"}, [53]))
    for component in ("master", "worker"):
        if any(o["kind"] in WORKLOADS and o["metadata"].get("namespace") == curvine.NAMESPACE for o in rendered):
            out.objects.append(_pod(curvine.NAMESPACE, f"other-{component}", curvine.component_labels(component)))
    out.objects.append(_pod(CLIENTS, "client", {"app": "client"}))
    out.objects.append(_pod(SCRAPERS, "prometheus", {"app": "prometheus"}))
    for lob, endpoints in operator_endpoints.items():
        for endpoint in endpoints:
            router = _pod(
                OPERATOR_NAMESPACE,
                f"{endpoint}-{lob}-router-pod",
                {"app": operator_router_pod_label(lob, endpoint)},
                [OPERATOR_ROUTER_PORT],
            )
            engine = _pod(lob_namespace(lob), f"{endpoint}-operator-engine", {"app": endpoint}, [ENGINE_PORT])
            out.objects += [router, engine]
            out.operator_routers[(lob, endpoint)] = endpoint_name(router)
            out.operator_engines[(lob, endpoint)] = endpoint_name(engine)
            out.lob_of[endpoint_name(router)] = lob
            out.lob_of[endpoint_name(engine)] = lob
    if any(o["kind"] == "NetworkPolicy" and o["metadata"].get("namespace") == curvine.NAMESPACE for o in rendered):
        out.objects += fence_policies(FUSE_NODES)
    return out


def fence_policies(addresses: Iterable[str]) -> list[dict[str, Any]]:
    """The fence's policies for nodes with these addresses, as l2_fence.py writes them (with the chart's arguments)."""
    targets = l2_fence.parse_targets([a.split("=", 1)[1] for a in fence_args() if a.startswith("--target=")])
    nodes = [
        {
            "metadata": {"name": f"gpu-{i}", "uid": f"uid-{i}"},
            "status": {"addresses": [{"type": "InternalIP", "address": a}]},
        }
        for i, a in enumerate(addresses)
    ]
    wanted, refused = l2_fence.desired(nodes, set(), curvine.NAMESPACE, FENCE_PREFIX, targets)
    assert not refused
    return list(wanted.values())


# ---- running nca and reading its table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Conn:
    """One `{protocols:...,dst_ports:...}` set, or all."""

    protocols: frozenset[str] | None  # None: any
    ports: tuple[tuple[int, int], ...] | None  # None: any

    def allows(self, protocol: str, port: int) -> bool:
        if self.protocols is not None and protocol not in self.protocols:
            return False
        return self.ports is None or any(lo <= port <= hi for lo, hi in self.ports)


ALL = (Conn(None, None),)
_GROUP = re.compile(r"\{([^{}]*)\}")


def parse_conns(text: str) -> tuple[Conn, ...]:
    text = text.strip()
    if text == "All connections":
        return ALL
    if text == "No connections":
        return ()
    conns = []
    for body in _GROUP.findall(text):
        protocols: frozenset[str] | None = None
        ports: tuple[tuple[int, int], ...] | None = None
        match = re.fullmatch(r"protocols:([A-Z,]+?)(?:,dst_ports:([0-9,\-]+))?", body.replace(" ", ""))
        if match is None:
            raise ValueError(f"nca connection not understood: {text!r}")
        protocols = frozenset(match.group(1).split(","))
        if match.group(2):
            ranges = []
            for part in match.group(2).split(","):
                lo, _, hi = part.partition("-")
                ranges.append((int(lo), int(hi or lo)))
            ports = tuple(ranges)
        conns.append(Conn(protocols, ports))
    if not conns:
        raise ValueError(f"nca connection not understood: {text!r}")
    return tuple(conns)


@dataclass
class Table:
    """What nca says is allowed: pod to pod, and address ranges to and from pods."""

    pods: dict[tuple[str, str], tuple[Conn, ...]] = field(default_factory=dict)
    from_ips: list[tuple[int, int, str, tuple[Conn, ...]]] = field(default_factory=list)  # lo, hi, dst, conns
    to_ips: list[tuple[str, int, int, tuple[Conn, ...]]] = field(default_factory=list)  # src, lo, hi, conns
    endpoints: int = 0

    def allowed(self, src: str, dst: str, protocol: str = "TCP", port: int = 0) -> bool:
        return any(c.allows(protocol, port) for c in self.pods.get((src, dst), ()))

    def allowed_from_ip(self, ip: str, dst: str, protocol: str = "TCP", port: int = 0) -> bool:
        value = int(ipaddress.ip_address(ip))
        return any(
            lo <= value <= hi and d == dst and any(c.allows(protocol, port) for c in conns)
            for lo, hi, d, conns in self.from_ips
        )

    def allowed_to_ip(self, src: str, ip: str, protocol: str = "TCP", port: int = 0) -> bool:
        value = int(ipaddress.ip_address(ip))
        return any(
            lo <= value <= hi and s == src and any(c.allows(protocol, port) for c in conns)
            for s, lo, hi, conns in self.to_ips
        )


def _ip_range(text: str) -> tuple[int, int] | None:
    try:
        if "-" in text:
            lo, hi = text.split("-", 1)
            return int(ipaddress.ip_address(lo)), int(ipaddress.ip_address(hi))
        if "/" in text:
            net = ipaddress.ip_network(text, strict=False)
            return int(net.network_address), int(net.broadcast_address)
        value = int(ipaddress.ip_address(text))
        return value, value
    except ValueError:
        return None


def parse_table(text: str) -> Table:
    table = Table()
    for line in text.splitlines():
        found = re.search(r"cluster has (\d+) unique endpoints", line)
        if found:
            table.endpoints = int(found.group(1))
        if " => " not in line or " : " not in line:
            continue
        pair, _, conns_text = line.partition(" : ")
        src, _, dst = pair.partition(" => ")
        conns = parse_conns(conns_text)
        src_ips, dst_ips = _ip_range(src.strip()), _ip_range(dst.strip())
        if src_ips is not None:
            table.from_ips.append((*src_ips, dst.strip(), conns))
        elif dst_ips is not None:
            table.to_ips.append((src.strip(), *dst_ips, conns))
        else:
            table.pods[(src.strip(), dst.strip())] = conns
    return table


def run_nca(objects: list[dict[str, Any]], folder: Path) -> tuple[Table, str]:
    """nca --connectivity over `objects`, one per file; the parsed table and nca's output."""
    # Namespaces, workloads and policies in folders of their own: nca gives a pod it reads before its namespace a
    # label-less namespace of its own (nca/NetworkConfig/TopologyObjectsFinder.py `get_or_update_namespace`).
    kinds = {"ns": ("Namespace",), "policies": ("NetworkPolicy",)}
    for sub in ("ns", "pods", "policies"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for i, obj in enumerate(objects):
        text = yaml.safe_dump(obj, sort_keys=False)
        assert "{{" not in text, f"nca would skip {obj['kind']}/{obj['metadata']['name']}"
        sub = next((k for k, v in kinds.items() if obj["kind"] in v), "pods")
        (folder / sub / f"{i:04d}-{obj['kind'].lower()}.yaml").write_text(text)
    command = [str(NCA), "--connectivity", str(folder / "policies"), "--ns_list", str(folder / "ns")]
    command += ["--pod_list", str(folder / "pods"), "--output_format", "txt_no_fw_rules", "--return_0"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-2000:]
    return parse_table(output), output
