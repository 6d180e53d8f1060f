"""Issue 37, item 6 (reviews-2026-12-c AWS S3-8): kvtier's Lambdas that call the EKS API from the VPC (the HyperPod
dependencies installer, the platform stack's node gate) each sit in a security group of their own: egress HTTPS only,
admitted on 443 to the interface endpoints and to the EKS cluster security group (the control plane's), and to
nothing else; never in the node group, which allows all traffic within itself. Template assertions on the session
synths (dev, prod); every stack's security-group rules are read, so a rule added anywhere else fails too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import Synth


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource["Properties"]
    return props


def _installer(synth: Synth) -> dict[str, Any]:
    functions = synth.resources("cluster", "AWS::Lambda::Function").values()
    [installer] = [f for f in functions if "HyperPod dependencies" in _props(f).get("Description", "")]
    return _props(installer)


def _group_of(synth: Synth, function: dict[str, Any]) -> str:
    [group] = function["VpcConfig"]["SecurityGroupIds"]
    assert set(group) == {"Fn::GetAtt"} and group["Fn::GetAtt"][1] == "GroupId", group
    return str(group["Fn::GetAtt"][0])


def _rules_naming(synth: Synth, group_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Every ingress or egress rule, in any stack, that names `group_id` (a cluster-stack group; other stacks import
    it by export, so a reference there names its logical id too)."""
    found = []
    for name, template in synth.templates.items():
        for resource in template["Resources"].values():
            if resource["Type"] in ("AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"):
                if group_id in json.dumps(_props(resource)):
                    found.append((name, _props(resource)))
            elif resource["Type"] == "AWS::EC2::SecurityGroup":
                for rule in [*_props(resource).get("SecurityGroupIngress", [])]:
                    if group_id in json.dumps(rule):
                        found.append((name, rule))
    return found


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_installer_has_a_group_of_its_own_not_the_node_group(env: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(env)
    group_id = _group_of(synth, _installer(synth))
    group = synth.template("cluster")["Resources"][group_id]
    assert group["Type"] == "AWS::EC2::SecurityGroup"  # in the cluster stack, not the network stack's node group
    assert "installer" in _props(group)["GroupDescription"]
    # egress: HTTPS anywhere (the EKS API, AWS APIs, GitHub and the chart registries through the NAT), nothing else
    assert _props(group)["SecurityGroupEgress"] == [
        {
            "CidrIp": "0.0.0.0/0",
            "Description": "HTTPS only: the EKS API, AWS APIs, downloads",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    assert "SecurityGroupIngress" not in _props(group)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_installer_is_admitted_to_the_endpoints_and_the_control_plane_only(
    env: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(env)
    group_id = _group_of(synth, _installer(synth))
    [eks_id] = synth.resources("cluster", "AWS::EKS::Cluster")
    admitted = _rules_naming(synth, group_id)
    targets = sorted(json.dumps(rule["GroupId"]) for _, rule in admitted)
    assert len(admitted) == 2, admitted
    for stack, rule in admitted:
        assert stack.endswith("-cluster")
        assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
        assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    assert json.dumps({"Fn::GetAtt": [eks_id, "ClusterSecurityGroupId"]}) in targets  # the control plane's ENIs
    assert any("EndpointSecurityGroup" in t for t in targets)  # the interface endpoints (a network-stack export)


def test_no_function_of_the_cluster_stack_runs_in_the_node_group(prod: Synth) -> None:
    """The node group allows all traffic within itself (HyperPod, EFA): a function there reaches every node and pod
    (the VPC CNI gives pods the node group) on every port. CDK's kubectl handler runs in the EKS cluster group."""
    groups = prod.resources("network", "AWS::EC2::SecurityGroup")
    [node_group] = [k for k, g in groups.items() if "HyperPod nodes" in _props(g)["GroupDescription"]]
    for name, template in prod.templates.items():
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] == "AWS::Lambda::Function" and "VpcConfig" in _props(resource):
                assert node_group not in json.dumps(_props(resource)["VpcConfig"]), f"{name}: {logical_id}"
