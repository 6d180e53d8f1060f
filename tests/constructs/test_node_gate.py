"""Issue 37, item 5 (reviews-2026-12-c AWS S3-7): one `cdk deploy --all` completes a first deploy. The platform
stack's first resource waits, under an hour, until a system node is Ready; everything else in that stack depends on
it, and it lives there (never in the cluster or network stack), so a timeout rolls back the platform stack alone.
Template assertions on the session synths; the gate's handler is tested in tests/lambdas/test_node_gate.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import pytest

from kvtier.constructs.node_gate import RESOURCE_TYPE
from kvtier.k8s.node_gate import NODE_GATE_GROUP
from tests.support import Synth

GATE_PREFIX = "SystemNodeGate"  # the construct id: every logical id of the gate's own pieces starts with it
_REF = re.compile(r'"Ref": "([A-Za-z0-9]+)"|"Fn::GetAtt": \["([A-Za-z0-9]+)"')


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource.get("Properties", {})
    return props


def _gate(synth: Synth) -> tuple[str, dict[str, Any]]:
    [(logical_id, gate)] = synth.resources("platform", RESOURCE_TYPE).items()
    return logical_id, gate


def _waits_for(resources: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """What each resource is created after: its DependsOn and the resources its properties reference."""
    edges = {}
    for logical_id, resource in resources.items():
        depends = resource.get("DependsOn", [])
        named = {a or b for a, b in _REF.findall(json.dumps(_props(resource)))} & set(resources)
        edges[logical_id] = set(depends if isinstance(depends, list) else [depends]) | named
    return edges


def _after(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for before in edges[todo.pop()] - seen:
            seen.add(before)
            todo.append(before)
    return seen


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_platform_resource_waits_for_a_ready_system_node(env: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(env)
    gate_id, gate = _gate(synth)
    assert _props(gate)["LabelSelector"] == "kvtier.io/role=system"
    assert _props(gate)["Environment"] == env
    resources = synth.template("platform")["Resources"]
    edges = _waits_for(resources)
    not_waiting = [k for k in resources if not k.startswith(GATE_PREFIX) and gate_id not in _after(edges, k)]
    assert not_waiting == []
    # The gate's own pieces come first: none of them waits for anything outside the gate.
    for logical_id in (k for k in resources if k.startswith(GATE_PREFIX)):
        assert all(k.startswith(GATE_PREFIX) for k in _after(edges, logical_id)), logical_id


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_gate_is_in_the_platform_stack_only(env: str, request: pytest.FixtureRequest) -> None:
    """A timeout must roll back nothing but the platform stack: never the network or cluster stack (EKS, HyperPod).
    (An existing cluster's nodes are already there: no gate; tests/stacks/test_existing_cluster.py.)"""
    synth: Synth = request.getfixturevalue(env)
    assert [n for n, t in synth.templates.items() if RESOURCE_TYPE in json.dumps(t)] == [f"kvtier-{env}-platform"]


def test_the_wait_is_bounded_under_an_hour(dev: Synth) -> None:
    """The waiter polls every 30 s, 100 times: 50 minutes, under CloudFormation's hour for a custom resource; the
    handler fails at 45 with its own message (tests/lambdas/test_node_gate.py)."""
    machines = dev.resources("platform", "AWS::StepFunctions::StateMachine")
    [machine] = [m for k, m in machines.items() if k.startswith(GATE_PREFIX)]
    definition = json.dumps(_props(machine)["DefinitionString"])
    interval = int(re.search(r'\\"IntervalSeconds\\":(\d+)', definition).group(1))  # type: ignore[union-attr]
    attempts = int(re.search(r'\\"MaxAttempts\\":(\d+)', definition).group(1))  # type: ignore[union-attr]
    assert (interval, attempts) == (30, 100)
    assert interval * attempts < 3600


def test_the_gate_reads_nodes_and_nothing_else(dev: Synth) -> None:
    """Its role's access entry has no access policy, only a Kubernetes group bound to a ClusterRole that may get and
    list nodes; its IAM policy reads the one EKS cluster; its is-complete handler runs in the VPC in its own group."""
    resources = dev.template("platform")["Resources"]
    [entry] = [r for k, r in resources.items() if r["Type"] == "AWS::EKS::AccessEntry" and k.startswith(GATE_PREFIX)]
    assert _props(entry)["KubernetesGroups"] == [NODE_GATE_GROUP]
    assert _props(entry)["Type"] == "STANDARD" and "AccessPolicies" not in _props(entry)
    [manifest] = [r for k, r in resources.items() if k.startswith(f"{GATE_PREFIX}NodeReader")]
    objects = json.loads(_props(manifest)["Manifest"])  # a JSON string: no token inside
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": NODE_GATE_GROUP}]
    functions = {k: r for k, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    [is_complete] = [r for r in functions.values() if _props(r)["Handler"] == "eks_api.node_gate.is_complete"]
    [group] = _props(is_complete)["VpcConfig"]["SecurityGroupIds"]
    assert group["Fn::GetAtt"][0].startswith(f"{GATE_PREFIX}SecurityGroup")
    policies = [r for k, r in resources.items() if r["Type"] == "AWS::IAM::Policy" and k.startswith(GATE_PREFIX)]
    gate_statements = [
        s for p in policies for s in _props(p)["PolicyDocument"]["Statement"] if s.get("Sid") == "ReadTheCluster"
    ]
    assert [s["Action"] for s in gate_statements] == ["eks:DescribeCluster"]
    assert "*" not in json.dumps([s["Resource"] for s in gate_statements])


def test_the_handlers_resolve_in_their_asset_as_lambda_imports_them(dev: Synth) -> None:
    """Each `eks_api.*` handler (the gate's and the installer's) is imported from its synthesized asset folder the way
    the Lambda runtime does it (awslambdaric `_get_handler`: rsplit the handler, import_module the dotted module),
    with nothing of kvtier importable: the package's relative imports and the asset's contents must be right."""
    handlers: dict[str, str] = {}
    for template in dev.templates.values():
        for resource in template["Resources"].values():
            handler = _props(resource).get("Handler", "")
            if resource["Type"] == "AWS::Lambda::Function" and handler.startswith("eks_api."):
                handlers[handler] = _props(resource)["Code"]["S3Key"].removesuffix(".zip")
    assert set(handlers) == {
        "eks_api.installer.on_event",
        "eks_api.node_gate.on_event",
        "eks_api.node_gate.is_complete",
    }
    for handler, asset in handlers.items():
        folder = dev.outdir / f"asset.{asset}"
        assert sorted(p.name for p in folder.iterdir()) == ["eks_api"]  # only the package, no other handler
        probe = (
            "import importlib, sys; sys.path.insert(0, '.'); "
            f"module, name = {handler!r}.rsplit('.', 1); "
            "assert callable(getattr(importlib.import_module(module), name)); "
            "assert 'kvtier' not in sys.modules"
        )
        done = subprocess.run(
            [sys.executable, "-I", "-c", probe], cwd=folder, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
