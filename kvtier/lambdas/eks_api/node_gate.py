"""Custom-resource handler: the platform stack's first resource, which waits until the EKS cluster has at least one
Ready node of kvtier's system role (issue 37).

HyperPod's continuous provisioning lets the cluster stack complete before any node has joined, and the platform
stack's Helm releases and manifests need system nodes. So on Create this waits, through the Provider framework's
is-complete polling (every 30 s, DEADLINE_S at most), until `GET /api/v1/nodes?labelSelector=<system selector>`
lists a node whose `Ready` condition is `True` and that is not cordoned. A timeout fails only the platform stack:
EKS and HyperPod are in the cluster stack, which is already complete.

- on_event: Create asks to wait (and stamps the time); Update and Delete never wait, so a rollback of the platform
  stack, or a later deploy while system nodes are being replaced, is never held up or failed by this gate.
- is_complete: an API error (the access entry still propagating, the endpoint not reachable yet) is logged and
  waited through; the deadline's message names the last one.

Runs in AWS Lambda (handler `eks_api.node_gate.on_event` / `.is_complete`), in the VPC (a private API endpoint);
standard library and boto3 only. Its role reads nodes through an access entry's Kubernetes group bound to a
ClusterRole that may only get and list nodes (kvtier/k8s/node_gate.py).
"""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from .cluster_access import cluster_api, eks_token, get_json

PREFIX = "kvtier-node-gate"
# The Provider framework's waiter gives up after TOTAL_TIMEOUT (kvtier/constructs/node_gate.py: 50 minutes, below
# CloudFormation's one hour for a custom resource) with a generic message; is_complete fails first, with its own.
DEADLINE_S = 45 * 60
REQUEST_TIMEOUT_S = 10

NodeList = Mapping[str, Any]
NodeReader = Callable[[str, str, str], NodeList]  # (cluster, region, label selector) -> the API's NodeList


def on_event(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    props = event["ResourceProperties"]
    physical_id = f"{PREFIX}/{props['ClusterName']}"
    if event["RequestType"] != "Create":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", physical_id), "Data": {"Wait": "false"}}
    return {"PhysicalResourceId": physical_id, "Data": {"Wait": "true", "RequestedAt": str(int(time.time()))}}


def is_complete(
    event: dict[str, Any], _context: Any, read: NodeReader | None = None, now: Callable[[], float] = time.time
) -> dict[str, Any]:
    data = event.get("Data") or {}
    if data.get("Wait") != "true":
        return {"IsComplete": True}
    props = event["ResourceProperties"]
    cluster, region, selector = props["ClusterName"], props["Region"], props["LabelSelector"]
    elapsed = now() - int(data.get("RequestedAt", "0"))
    try:
        nodes = (read or read_nodes)(cluster, region, selector)
    except (urllib.error.URLError, TimeoutError, OSError, ValueError, ClientError, BotoCoreError) as err:
        problem = f"the nodes could not be read: {_describe(err)}"
    else:
        ready = ready_nodes(nodes)
        if ready:
            _log("a system node is Ready", cluster=cluster, nodes=ready)
            return {"IsComplete": True, "Data": {"Node": ready[0]}}
        problem = _not_ready(nodes, selector)
    _log("waiting for a Ready system node", cluster=cluster, elapsed_s=int(elapsed), problem=problem)
    if elapsed >= DEADLINE_S:
        raise RuntimeError(
            f"EKS cluster {cluster} has no Ready node labelled {selector} {int(elapsed // 60)} minutes after the "
            f"platform stack started ({problem}); the cluster stack is unchanged. Check the system instance group "
            f"with `kvtier status -e {props.get('Environment', '<env>')}` (a group below its target lists the `aws "
            "sagemaker list-cluster-events` command), then deploy again"
        )
    return {"IsComplete": False}


def ready_nodes(nodes: NodeList) -> list[str]:
    """Names of the listed nodes that are Ready and schedulable (not cordoned)."""
    ready = []
    for node in nodes.get("items", []):
        conditions = node.get("status", {}).get("conditions", [])
        is_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        if is_ready and not node.get("spec", {}).get("unschedulable", False):
            ready.append(str(node.get("metadata", {}).get("name", "?")))
    return sorted(ready)


def _not_ready(nodes: NodeList, selector: str) -> str:
    items = nodes.get("items", [])
    if not items:
        return f"no node labelled {selector} has joined yet"
    return f"{len(items)} node(s) labelled {selector}, none Ready and schedulable yet"


def read_nodes(cluster: str, region: str, selector: str, session: boto3.session.Session | None = None) -> NodeList:
    """The cluster's nodes that carry `selector`, read with this Lambda's own role."""
    session = session or boto3.session.Session(region_name=region)
    api = cluster_api(session, cluster, region)
    token = eks_token(session, cluster, region)
    listed: NodeList = get_json(api, token, "/api/v1/nodes", {"labelSelector": selector}, REQUEST_TIMEOUT_S)
    return listed


def _describe(err: BaseException) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return str(err.reason)
    return f"{type(err).__name__}: {err}"


def _log(message: str, **fields: Any) -> None:
    print(json.dumps({"message": message, **fields}, default=str))
