"""EKS add-ons: the one list of every add-on kvtier installs, with its version, phase and IAM role.

Design "Add-ons and controllers: one owner each": the cluster stack owns the networking add-ons (installed before
any HyperPod node) and the add-ons whose pods need nodes (after the HyperPod cluster); the platform stack owns the
Inference Operator add-on. Nothing else declares an add-on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.constructs.eks import KvtierEks
from kvtier.constructs.nag import acknowledge, managed_policy
from kvtier.stacks.manifests import HelmRelease, StackOutputs

Phase = Literal["network", "nodes", "platform"]


@dataclass(frozen=True)
class AddonSpec:
    name: str
    version: str
    phase: Phase
    source: str  # where the version pin comes from
    namespace: str = "kube-system"
    service_account: str | None = None  # gets an IRSA role when set
    managed_policies: tuple[str, ...] = ()
    configuration: Mapping[str, Any] = field(default_factory=dict)


# Versions are pinned; none could be read from a live `describe-addon-versions` here. A version EKS does not offer
# for 1.34 fails the deployment at once (CloudFormation rejects the add-on), never silently. Sources: docs/references.md.
_BLUEPRINTS = "awslabs/cdk-eks-blueprints@0b82904e lib/addons (Kubernetes 1.34)"
_OPERATOR_SCRIPT = "aws/sagemaker-hyperpod-cli helm_to_addon.sh (reference aws-hyperpod.md 3.1)"

ADDONS: tuple[AddonSpec, ...] = (
    # Before nodes (reference aws-hyperpod.md 8, item 4: the HyperPod EKS prerequisites).
    AddonSpec(
        "vpc-cni",
        "v1.20.4-eksbuild.2",  # HyperPod needs >= 1.18.3
        "network",
        _BLUEPRINTS,
        service_account="aws-node",
        managed_policies=("AmazonEKS_CNI_Policy",),
        # Network policy enforcement, which the LOB NetworkPolicies rely on (a string, not a boolean).
        configuration={"enableNetworkPolicy": "true"},
    ),
    AddonSpec("kube-proxy", "v1.34.6-eksbuild.2", "network", "EKS user guide, managing-kube-proxy (1.34 row)"),
    AddonSpec("coredns", "v1.13.2-eksbuild.11", "network", "EKS user guide, managing-coredns (1.34 row)"),
    AddonSpec("eks-pod-identity-agent", "v1.3.10-eksbuild.2", "network", _BLUEPRINTS),
    # After the HyperPod cluster: their pods need nodes.
    AddonSpec(
        "aws-ebs-csi-driver",
        "v1.56.0-eksbuild.1",
        "nodes",
        _BLUEPRINTS,
        service_account="ebs-csi-controller-sa",
        managed_policies=("service-role/AmazonEBSCSIDriverPolicy",),
    ),
    AddonSpec("metrics-server", "v0.7.2-eksbuild.4", "nodes", _OPERATOR_SCRIPT),
    AddonSpec("cert-manager", "v1.18.2-eksbuild.2", "nodes", _OPERATOR_SCRIPT),
    AddonSpec(
        "aws-mountpoint-s3-csi-driver",
        "v1.14.1-eksbuild.1",
        "nodes",
        _OPERATOR_SCRIPT,
        service_account="s3-csi-driver-sa",
    ),
    AddonSpec(
        "aws-fsx-csi-driver",
        "v1.6.0-eksbuild.1",
        "nodes",
        _OPERATOR_SCRIPT,
        service_account="fsx-csi-controller-sa",
        managed_policies=("AmazonFSxFullAccess",),
    ),
)


def addons(phase: Phase) -> tuple[AddonSpec, ...]:
    return tuple(a for a in ADDONS if a.phase == phase)


def addon(name: str) -> AddonSpec:
    return next(a for a in ADDONS if a.name == name)


# Permissions beyond managed policies, per add-on; each builder gets the construct and a context.
StatementBuilder = Callable[[Construct, Mapping[str, str]], list[iam.PolicyStatement]]


def _ebs_statements(_scope: Construct, ctx: Mapping[str, str]) -> list[iam.PolicyStatement]:
    # Curvine master volumes on HyperPod nodes: attach fails with ValidationException without these
    # (reference aws-hyperpod.md 3.3, last item; design "Add-ons").
    return [
        iam.PolicyStatement(
            sid="HyperPodNodeVolumes",
            actions=["sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"],
            resources=[ctx["hyperpod_cluster_arn"]],
        ),
        iam.PolicyStatement(sid="DescribeCluster", actions=["eks:DescribeCluster"], resources=[ctx["eks_cluster_arn"]]),
    ]


def _s3_statements(scope: Construct, _ctx: Mapping[str, str]) -> list[iam.PolicyStatement]:
    # Model weights in S3 are mounted read-only. Buckets belong to lines of business, which must not change
    # this stack, so the grant is read-only and limited to buckets of this account (docs/references.md).
    account = Stack.of(scope).account
    return [
        iam.PolicyStatement(
            sid="ReadModelBuckets",
            actions=["s3:ListBucket", "s3:GetObject"],
            resources=["arn:aws:s3:::*", "arn:aws:s3:::*/*"],
            conditions={"StringEquals": {"s3:ResourceAccount": account}},
        )
    ]


def _no_statements(_scope: Construct, _ctx: Mapping[str, str]) -> list[iam.PolicyStatement]:
    return []


ACCEPTED_WILDCARDS: Mapping[str, Mapping[str, str]] = {
    "aws-mountpoint-s3-csi-driver": {
        "AwsSolutions-IAM5[Resource::arn:aws:s3:::*]": "Read-only, limited to this account's buckets "
        "(s3:ResourceAccount); LOB model buckets must not change the cluster stack.",
        "AwsSolutions-IAM5[Resource::arn:aws:s3:::*/*]": "Read-only objects of this account's buckets, as above.",
    },
}

EXTRA_STATEMENTS: Mapping[str, StatementBuilder] = {
    "aws-ebs-csi-driver": _ebs_statements,
    "aws-mountpoint-s3-csi-driver": _s3_statements,
}


class ClusterAddons(Construct):
    """One `AWS::EKS::Addon` per spec, each with its own IRSA role where it needs one."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        eks_cluster: KvtierEks,
        specs: Sequence[AddonSpec],
        outputs: StackOutputs,
        context: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.addons: dict[str, eks.CfnAddon] = {}
        self.roles: dict[str, iam.Role] = {}
        for spec in specs:
            role_arn = None
            if spec.service_account:
                role = iam.Role(
                    self,
                    f"{_pascal(spec.name)}Role",
                    assumed_by=eks_cluster.service_account_principal(
                        f"{_pascal(spec.name)}Trust", spec.namespace, spec.service_account
                    ),
                    description=f"EKS add-on {spec.name} ({spec.namespace}/{spec.service_account})",
                    managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in spec.managed_policies],
                )
                for statement in EXTRA_STATEMENTS.get(spec.name, _no_statements)(self, context or {}):
                    role.add_to_policy(statement)
                for policy in spec.managed_policies:
                    acknowledge(role, managed_policy(policy), f"The AWS managed policy EKS documents for {spec.name}.")
                for finding, reason in ACCEPTED_WILDCARDS.get(spec.name, {}).items():
                    acknowledge(role, finding, reason)
                self.roles[spec.name] = role
                role_arn = role.role_arn
            outputs.releases.append(
                HelmRelease(
                    "eks-addon",
                    spec.name,
                    spec.name,
                    spec.version,
                    spec.namespace,
                    dict(spec.configuration),
                    spec.source,
                )
            )
            self.addons[spec.name] = eks.CfnAddon(
                self,
                _pascal(spec.name),
                addon_name=spec.name,
                addon_version=spec.version,
                cluster_name=eks_cluster.cluster.cluster_name,
                resolve_conflicts="OVERWRITE",
                service_account_role_arn=role_arn,
                configuration_values=json.dumps(spec.configuration, sort_keys=True) if spec.configuration else None,
            )


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))
