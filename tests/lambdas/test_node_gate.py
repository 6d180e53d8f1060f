"""The platform stack's system-node gate (issue 37, item 5), run locally: its real reader (token, eks:DescribeCluster
behind botocore's Stubber, an HTTP GET) against a Kubernetes API stand-in on 127.0.0.1 that serves NodeLists."""

from __future__ import annotations

import base64
import functools
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.stub import Stubber

from kvtier.lambdas.eks_api import node_gate

SELECTOR = "kvtier.io/role=system"
CLUSTER = "kvtier-dev"


class FakeApi(ThreadingHTTPServer):
    """Answers GET /api/v1/nodes with the next queued (status, body); records each request's path and headers."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.requests: list[tuple[str, dict[str, str]]] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def do_GET(self) -> None:
        self.server.requests.append((self.path, dict(self.headers)))
        status, body = self.server.answers.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture()
def api() -> Iterator[FakeApi]:
    server = FakeApi()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _session(endpoint: str, calls: int) -> tuple[boto3.session.Session, Stubber]:
    """A session with test credentials (the token is signed locally) whose EKS client answers DescribeCluster with
    `endpoint`, `calls` times."""
    core = botocore.session.Session()
    core.set_credentials("AKIDEXAMPLE", "secret")
    session = boto3.session.Session(botocore_session=core, region_name="us-west-2")
    eks = session.client("eks", region_name="us-west-2")
    stubber = Stubber(eks)
    for _ in range(calls):
        stubber.add_response(
            "describe_cluster",
            {"cluster": {"name": CLUSTER, "endpoint": endpoint, "certificateAuthority": {"data": "Q0E="}}},
            {"name": CLUSTER},
        )
    plain = session.client

    def client(service: str, region_name: str | None = None) -> Any:
        return eks if service == "eks" else plain(service, region_name=region_name)  # type: ignore[call-overload]

    setattr(session, "client", client)  # noqa: B010 (mypy refuses assigning to a method)
    return session, stubber


def _node(name: str, ready: str = "True", unschedulable: bool = False) -> dict[str, Any]:
    node: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"kvtier.io/role": "system"}},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]},
    }
    if unschedulable:
        node["spec"] = {"unschedulable": True}
    return node


def _nodes(*items: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "NodeList", "apiVersion": "v1", "items": list(items)}


def _waiting(requested: int = 1000) -> dict[str, Any]:
    return {
        "RequestType": "Create",
        "PhysicalResourceId": f"{node_gate.PREFIX}/{CLUSTER}",
        "ResourceProperties": {
            "ClusterName": CLUSTER,
            "Region": "us-west-2",
            "LabelSelector": SELECTOR,
            "Environment": "dev",
        },
        "Data": {"Wait": "true", "RequestedAt": str(requested)},
    }


def test_only_a_create_waits() -> None:
    props = {"ClusterName": CLUSTER, "Region": "us-west-2", "LabelSelector": SELECTOR}
    created = node_gate.on_event({"RequestType": "Create", "ResourceProperties": props}, None)
    assert created["PhysicalResourceId"] == f"{node_gate.PREFIX}/{CLUSTER}"
    assert created["Data"]["Wait"] == "true" and int(created["Data"]["RequestedAt"]) > 0
    for kind in ("Update", "Delete"):  # a rollback or a later deploy is never held up by the gate
        event = {"RequestType": kind, "PhysicalResourceId": created["PhysicalResourceId"], "ResourceProperties": props}
        result = node_gate.on_event(event, None)
        assert result == {"PhysicalResourceId": created["PhysicalResourceId"], "Data": {"Wait": "false"}}
        assert node_gate.is_complete({**event, **result}, None) == {"IsComplete": True}


def test_it_waits_until_a_system_node_is_ready_and_schedulable(api: FakeApi) -> None:
    """Polls: nobody joined yet; one node NotReady; Ready but cordoned; Ready. Each poll reads the API with a fresh
    EKS token and the role's label selector."""
    api.answers = [
        (200, _nodes()),
        (200, _nodes(_node("hyperpod-i-0a", ready="False"))),
        (200, _nodes(_node("hyperpod-i-0a", unschedulable=True))),
        (200, _nodes(_node("hyperpod-i-0b", ready="Unknown"), _node("hyperpod-i-0a"))),
    ]
    session, stubber = _session(api.endpoint, calls=4)
    read = functools.partial(node_gate.read_nodes, session=session)
    with stubber:
        for poll in (1000.0, 1030.0, 1060.0):
            assert node_gate.is_complete(_waiting(), None, read, now=functools.partial(float, poll)) == {
                "IsComplete": False
            }
        done = node_gate.is_complete(_waiting(), None, read, now=functools.partial(float, 1090.0))
    assert done == {"IsComplete": True, "Data": {"Node": "hyperpod-i-0a"}}
    stubber.assert_no_pending_responses()
    assert len(api.requests) == 4
    for path, headers in api.requests:
        url = urllib.parse.urlparse(path)
        assert url.path == "/api/v1/nodes"
        assert urllib.parse.parse_qs(url.query) == {"labelSelector": [SELECTOR]}
        token = headers["Authorization"].removeprefix("Bearer ")
        assert token.startswith("k8s-aws-v1.")
        presigned = base64.urlsafe_b64decode(token[len("k8s-aws-v1.") :] + "==").decode()
        assert presigned.startswith("https://sts.us-west-2.amazonaws.com/?Action=GetCallerIdentity")


def test_an_api_error_is_waited_through_and_named_at_the_deadline(api: FakeApi) -> None:
    """403 (the access entry not propagated yet, say) is a wait, not a failure; at the deadline the message names
    it, the selector, and what to check."""
    api.answers = [(403, {"kind": "Status", "reason": "Forbidden"})] * 2
    session, stubber = _session(api.endpoint, calls=2)
    read = functools.partial(node_gate.read_nodes, session=session)
    with stubber:
        assert node_gate.is_complete(_waiting(), None, read, now=functools.partial(float, 1030.0)) == {
            "IsComplete": False
        }
        late = 1000.0 + node_gate.DEADLINE_S
        with pytest.raises(RuntimeError) as failed:
            node_gate.is_complete(_waiting(), None, read, now=functools.partial(float, late))
    message = str(failed.value)
    assert message.startswith(f"EKS cluster {CLUSTER} has no Ready node labelled {SELECTOR} 45 minutes after")
    assert "HTTP 403 Forbidden" in message and "`kvtier status -e dev`" in message
    assert "the cluster stack is unchanged" in message


def test_an_unreachable_api_is_waited_through() -> None:
    """No listener on the endpoint's port (the private endpoint not reachable yet): a wait, never a raise before
    the deadline; the deadline message says what failed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the poll: connection refused
    session, stubber = _session(f"http://127.0.0.1:{port}", calls=2)
    read = functools.partial(node_gate.read_nodes, session=session)
    with stubber:
        assert node_gate.is_complete(_waiting(), None, read, now=functools.partial(float, 1030.0)) == {
            "IsComplete": False
        }
        with pytest.raises(RuntimeError, match=r"the nodes could not be read: .*refused"):
            node_gate.is_complete(_waiting(), None, read, now=functools.partial(float, 1000.0 + node_gate.DEADLINE_S))


def test_readiness_is_the_ready_condition_of_a_schedulable_node() -> None:
    listed = _nodes(
        _node("a"),
        _node("b", ready="False"),
        _node("c", unschedulable=True),
        {"metadata": {"name": "d"}, "status": {}},  # no conditions reported yet
        _node("e"),
    )
    assert node_gate.ready_nodes(listed) == ["a", "e"]
    assert node_gate.ready_nodes({"items": []}) == []
