#!/usr/bin/env python3
"""kvtier L2 fence: admits the host-network FUSE pods to Curvine's RPC ports, one node at a time, by node IP.

curvine-csi runs each node's FUSE client as a host-network pod, so what reaches the masters and workers from it has
the node's IP as its source, which no pod or namespace selector can name. Every --interval-s this writes, in the
`curvine` namespace, one NetworkPolicy per node that matches --node-selector: `<prefix><node>`, admitting only
`<node InternalIP>/32` to the master RPC port (masters) and the worker RPC port (workers). Each policy is owned by its
Node (an ownerReference), so the garbage collector deletes it with the Node even while this fence is down; a policy
whose node is gone or whose address changed is deleted here as well.

A /32 of a node's primary address is never a pod's address on the VPC CNI: pods get the ENIs' secondary addresses or
prefixes, never an ENI's primary address (docs/l2.md "Who may reach Curvine"). Defence in depth against an address
reused after a node went away: an address that any pod without host networking holds now is never admitted (the
node's policy is deleted), and the fence says so on stderr.

Only the standard library: it runs in the Curvine image's python3, from a ConfigMap, with its service account.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import ssl
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

FENCE_LABEL = "kvtier.io/l2-fence"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def node_address(node: dict[str, Any]) -> str | None:
    """The node's primary IPv4 address (its first InternalIP), or None."""
    for address in node.get("status", {}).get("addresses", []) or []:
        if address.get("type") == "InternalIP":
            try:
                ip = ipaddress.ip_address(str(address.get("address")))
            except ValueError:
                continue
            if ip.version == 4:
                return str(ip)
    return None


def policy_name(prefix: str, node: str) -> str:
    return (prefix + node)[:253]


def fence_policy(
    node: dict[str, Any], address: str, namespace: str, prefix: str, targets: list[dict[str, Any]]
) -> dict[str, Any]:
    """The NetworkPolicy admitting one node's address: `targets` are (podSelector, port) pairs."""
    meta = node.get("metadata", {})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": policy_name(prefix, str(meta.get("name"))),
            "namespace": namespace,
            "labels": {FENCE_LABEL: "true"},
            "annotations": {"kvtier.io/node-address": address},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": meta.get("name"), "uid": meta.get("uid")}],
        },
        "spec": {
            "podSelector": {
                "matchExpressions": [
                    {"key": t["key"], "operator": "In", "values": sorted({str(x["value"]) for x in targets})}
                    for t in targets[:1]
                ]
            },
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"ipBlock": {"cidr": f"{address}/32"}}],
                    "ports": [{"protocol": "TCP", "port": int(t["port"])} for t in targets],
                }
            ],
        },
    }


def desired(
    nodes: list[dict[str, Any]],
    pod_addresses: set[str],
    namespace: str,
    prefix: str,
    targets: list[dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The fence policies wanted now, by name, and a line for each node left out (no address, or a pod holds it)."""
    wanted: dict[str, dict[str, Any]] = {}
    refused: list[str] = []
    for node in nodes:
        name = str(node.get("metadata", {}).get("name"))
        address = node_address(node)
        if address is None:
            refused.append(f"node {name}: no IPv4 InternalIP; its FUSE pod is not admitted")
            continue
        if address in pod_addresses:
            refused.append(f"node {name}: {address} is a pod's address (not host network); not admitted")
            continue
        policy = fence_policy(node, address, namespace, prefix, targets)
        wanted[policy["metadata"]["name"]] = policy
    return wanted, refused


def plan(existing: list[dict[str, Any]], wanted: dict[str, dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(names to delete, policies to create): a policy that differs from the wanted one is replaced."""
    have = {str(p["metadata"]["name"]): p for p in existing}
    delete = [n for n, p in sorted(have.items()) if n not in wanted or p.get("spec") != wanted[n]["spec"]]
    create = [p for n, p in sorted(wanted.items()) if n not in have or n in delete]
    return delete, create


class Kube:
    """The few API calls the fence makes, with its service account."""

    def __init__(self, base_url: str, token_file: str | None, ca_file: str | None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_file = token_file
        self.timeout_s = timeout_s
        self.context = ssl.create_default_context(cafile=ca_file) if base_url.startswith("https") else None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if self.token_file:
            headers["Authorization"] = "Bearer " + Path(self.token_file).read_text(encoding="utf-8").strip()
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as response:
            loaded = json.loads(response.read().decode("utf-8") or "{}")
        return loaded if isinstance(loaded, dict) else {}

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        suffix = ("?" + urllib.parse.urlencode(query)) if query else ""
        return [i for i in self.call("GET", path + suffix).get("items", []) if isinstance(i, dict)]


def pod_held(kube: Kube, addresses: list[str]) -> set[str]:
    """The addresses among `addresses` that a pod without host networking holds now."""
    held = set()
    for address in addresses:
        for pod in kube.items("/api/v1/pods", fieldSelector=f"status.podIP={address}"):
            if not pod.get("spec", {}).get("hostNetwork"):
                held.add(address)
    return held


def reconcile(kube: Kube, args: argparse.Namespace, targets: list[dict[str, Any]]) -> list[str]:
    """One pass; returns what it did or refused, a line each."""
    workers = kube.items(f"/api/v1/namespaces/{args.namespace}/pods", labelSelector=args.worker_selector)
    on = {str(w.get("spec", {}).get("nodeName")) for w in workers if w.get("spec", {}).get("nodeName")}
    nodes = [n for n in kube.items("/api/v1/nodes") if n.get("metadata", {}).get("name") in on]
    addresses = [a for a in (node_address(n) for n in nodes) if a is not None]
    wanted, lines = desired(nodes, pod_held(kube, addresses), args.namespace, args.prefix, targets)
    base = f"/apis/networking.k8s.io/v1/namespaces/{args.namespace}/networkpolicies"
    existing = kube.items(base, labelSelector=f"{FENCE_LABEL}=true")
    delete, create = plan(existing, wanted)
    for name in delete:
        kube.call("DELETE", f"{base}/{name}")
        lines.append(f"deleted {name}")
    for policy in create:
        kube.call("POST", base, policy)
        lines.append(
            f"created {policy['metadata']['name']} ({policy['metadata']['annotations']['kvtier.io/node-address']})"
        )
    return lines


def parse_targets(values: list[str]) -> list[dict[str, Any]]:
    """--target KEY=VALUE:PORT (repeat): the pods (one label key) and the RPC port each serves."""
    targets = []
    for value in values:
        selector, _, port = value.rpartition(":")
        key, _, label = selector.partition("=")
        targets.append({"key": key, "value": label, "port": int(port)})
    if len({t["key"] for t in targets}) != 1:
        raise SystemExit("l2_fence: every --target names the same label key")
    return targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--worker-selector", required=True, help="label selector of the Curvine workers' pods")
    parser.add_argument("--prefix", default="l2-fence-")
    parser.add_argument("--target", action="append", default=[], help="KEY=VALUE:PORT (repeat)")
    parser.add_argument("--interval-s", type=float, default=10.0)
    parser.add_argument("--api", default="https://kubernetes.default.svc")
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--heartbeat", help="a file touched after every pass that succeeded (the probes read its age)")
    args = parser.parse_args(argv)
    targets = parse_targets(args.target)
    token = f"{SA_DIR}/token" if Path(f"{SA_DIR}/token").exists() else None
    ca = f"{SA_DIR}/ca.crt" if Path(f"{SA_DIR}/ca.crt").exists() else None
    kube = Kube(args.api, token, ca)
    while True:
        try:
            for line in reconcile(kube, args, targets):
                print(f"l2_fence: {line}", file=sys.stderr, flush=True)
            if args.heartbeat:
                Path(args.heartbeat).touch()
        except (OSError, ValueError) as err:  # urllib errors are OSErrors; retried next pass
            print(f"l2_fence: pass failed: {err}", file=sys.stderr, flush=True)
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval_s)


if __name__ == "__main__":
    sys.exit(main())
