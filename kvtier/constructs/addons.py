"""EKS add-ons as resources: one `AWS::EKS::Addon` per registry entry (kvtier/addons.py), with its IRSA role."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.addons import AddonSpec
from kvtier.constructs.eks_access import EksAccess
from kvtier.constructs.manifests import StackOutputs, addon_release
from kvtier.constructs.nag import acknowledge, managed_policy

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
        eks_cluster: EksAccess,  # created (KvtierEks) or imported (ExistingEks)
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
            outputs.releases.append(addon_release(spec))
            self.addons[spec.name] = eks.CfnAddon(
                self,
                _pascal(spec.name),
                addon_name=spec.name,
                addon_version=spec.version,
                cluster_name=eks_cluster.icluster.cluster_name,
                resolve_conflicts="OVERWRITE",
                service_account_role_arn=role_arn,
                configuration_values=json.dumps(spec.configuration, sort_keys=True) if spec.configuration else None,
            )


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))
