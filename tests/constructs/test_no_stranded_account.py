"""Issue 26, a first `cdk deploy` that cannot strand the account: template assertions on the session synths (dev,
prod) for the AWS review's findings (EFA egress, node-role trust, continuous provisioning, endpoint access)."""

from __future__ import annotations

import json
from typing import Any

from kvtier.constructs.hyperpod import NODE_PROVISIONING_MODE
from tests.support import Synth


def _props(resource: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = resource["Properties"]
    return props


def _node_group_id(synth: Synth) -> str:
    groups = synth.resources("network", "AWS::EC2::SecurityGroup")
    return next(k for k, g in groups.items() if "HyperPod nodes" in _props(g)["GroupDescription"])


def _egress(synth: Synth, group_id: str) -> list[dict[str, Any]]:
    """Every egress rule of the group: inline ones and separate AWS::EC2::SecurityGroupEgress resources."""
    inline = _props(synth.template("network")["Resources"][group_id]).get("SecurityGroupEgress", [])
    separate = [
        _props(r)
        for r in synth.resources("network", "AWS::EC2::SecurityGroupEgress").values()
        if _props(r)["GroupId"] == {"Fn::GetAtt": [group_id, "GroupId"]}
    ]
    return [*inline, *separate]


def test_node_group_allows_efa_egress_to_itself(dev: Synth, prod: Synth) -> None:
    """S1: with allow_all_outbound=True CDK dropped the self egress; EFA's connectivity check needs it."""
    for synth in (dev, prod):
        group = _node_group_id(synth)
        rules = _egress(synth, group)
        to_self = [r for r in rules if r.get("DestinationSecurityGroupId") == {"Fn::GetAtt": [group, "GroupId"]}]
        assert [r["IpProtocol"] for r in to_self] == ["-1"], rules
        assert [r["IpProtocol"] for r in rules if r.get("CidrIp") == "0.0.0.0/0"] == ["-1"], rules


def test_node_execution_role_trusts_sagemaker_without_undocumented_conditions(dev: Synth) -> None:
    """S2: HyperPod is not documented to send aws:SourceAccount; nodes would get no credentials."""
    roles = dev.resources("cluster", "AWS::IAM::Role").values()
    [role] = [r for r in roles if "HyperPod node execution role" in json.dumps(_props(r).get("Description", ""))]
    [statement] = _props(role)["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "Condition" not in statement


def test_cluster_provisions_continuously(dev: Synth, prod: Synth) -> None:
    """S2: standard provisioning made the first create all-or-nothing for scarce ml.g6e capacity."""
    for synth in (dev, prod):
        cluster = _props(synth.only("cluster", "AWS::SageMaker::Cluster"))
        assert cluster["NodeProvisioningMode"] == NODE_PROVISIONING_MODE == "Continuous"


def test_endpoints_admit_the_kubectl_handlers_cluster_group(prod: Synth) -> None:
    """S3: CDK's kubectl handler runs in the EKS-created cluster security group; with an `eks` or `ecr.api`
    interface endpoint it must be admitted, or every manifest times out."""
    [eks_id] = prod.resources("cluster", "AWS::EKS::Cluster")
    ingress = [_props(r) for r in prod.resources("cluster", "AWS::EC2::SecurityGroupIngress").values()]
    from_cluster_group = [
        r for r in ingress if r.get("SourceSecurityGroupId") == {"Fn::GetAtt": [eks_id, "ClusterSecurityGroupId"]}
    ]
    assert len(from_cluster_group) == 1, ingress
    [rule] = from_cluster_group
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    assert "EndpointSecurityGroup" in json.dumps(rule["GroupId"])


def test_model_reader_trusts_only_its_lobs_service_account(prod: Synth) -> None:
    """Open since the first review: the Pod Identity trust had no condition, so any association in the account
    could assume a LOB's model reader."""
    roles = prod.resources("search", "AWS::IAM::Role").values()  # search loads its weights from S3
    [role] = [r for r in roles if "read its model prefixes" in json.dumps(_props(r).get("Description", ""))]
    [statement] = _props(role)["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    tags = statement["Condition"]["StringEquals"]
    assert tags["aws:RequestTag/kubernetes-namespace"] == "kvtier-search"
    assert tags["aws:RequestTag/kubernetes-service-account"] == "model-reader"
    assert "aws:RequestTag/eks-cluster-name" in tags
