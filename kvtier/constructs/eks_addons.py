"""EKS add-ons as resources: one `AWS::EKS::Addon` per registry entry (kvtier/addons.py), with its IRSA role."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.addons import AddonSpec
from kvtier.constructs.eks_access import EksAccess
from kvtier.constructs.manifests import StackOutputs, addon_release
from kvtier.constructs.model_access import ModelKey, decrypt_statements
from kvtier.constructs.nag import acknowledge_all, managed_policy
from kvtier.naming import MODEL_READER_TAG_VALUE, model_reader_tag, own_bucket_patterns


@dataclass(frozen=True)
class AddonContext:
    """What the add-ons' extra permissions name: the clusters, the environment (its own buckets, its model tag), and
    how model buckets are read: `tagged` (S3 ABAC, no bucket named) or `named` (exactly `model_buckets`)."""

    hyperpod_cluster_arn: str = ""
    eks_cluster_arn: str = ""
    env_name: str = ""
    bucket_access: str = "named"
    model_buckets: tuple[str, ...] = ()
    # SSE-KMS keys of the model buckets (issue 37): named in either mode (a grant names its key).
    model_keys: tuple[ModelKey, ...] = ()


# Permissions beyond managed policies, per add-on; each builder gets the construct and the context.
StatementBuilder = Callable[[Construct, AddonContext], list[iam.PolicyStatement]]


def _ebs_statements(_scope: Construct, ctx: AddonContext) -> list[iam.PolicyStatement]:
    # Curvine master volumes on HyperPod nodes: attach fails with ValidationException without these
    # (reference aws-hyperpod.md 3.3, last item; design "Add-ons").
    return [
        iam.PolicyStatement(
            sid="HyperPodNodeVolumes",
            actions=["sagemaker:AttachClusterNodeVolume", "sagemaker:DetachClusterNodeVolume"],
            resources=[ctx.hyperpod_cluster_arn],
        ),
        iam.PolicyStatement(sid="DescribeCluster", actions=["eks:DescribeCluster"], resources=[ctx.eks_cluster_arn]),
    ]


def _s3_statements(scope: Construct, ctx: AddonContext) -> list[iam.PolicyStatement]:
    """Read-only on the model buckets, never on kvtier's own buckets (lifecycle scripts, TLS certificates): anyone who
    may create an InferenceEndpointConfig can name any bucket the driver reads. `named`: exactly the buckets the LOB
    files name. `tagged`: the account's buckets that opted in with S3 ABAC (the bucket tag `model_reader_tag(env)`);
    the grant names no bucket, so a LOB with a new bucket changes no stack but its own (S3 evaluates
    `aws:ResourceTag` only on buckets with ABAC enabled: docs/references.md "Issue 26: LOB model buckets")."""
    stack = Stack.of(scope)
    partition = stack.partition
    statements = []
    if ctx.bucket_access == "tagged":
        any_bucket = f"arn:{partition}:s3:::*"
        statements.append(
            iam.PolicyStatement(
                sid="ReadTaggedModelBuckets",
                actions=["s3:ListBucket", "s3:GetObject"],
                resources=[any_bucket, f"{any_bucket}/*"],
                conditions={
                    "StringEquals": {
                        "s3:ResourceAccount": stack.account,
                        f"aws:ResourceTag/{model_reader_tag(ctx.env_name)}": MODEL_READER_TAG_VALUE,
                    }
                },
            )
        )
    elif ctx.model_buckets:
        buckets = [f"arn:{partition}:s3:::{b}" for b in ctx.model_buckets]
        statements.append(
            iam.PolicyStatement(
                sid="ReadModelBuckets",
                actions=["s3:ListBucket", "s3:GetObject"],
                resources=[*buckets, *(f"{b}/*" for b in buckets)],
                conditions={"StringEquals": {"s3:ResourceAccount": stack.account}},
            )
        )
    statements += decrypt_statements(scope, ctx.model_keys, "DecryptModels")
    own = [f"arn:{partition}:s3:::{pattern}" for pattern in own_bucket_patterns(ctx.env_name)]
    statements.append(
        iam.PolicyStatement(
            sid="NeverKvtierBuckets",
            effect=iam.Effect.DENY,
            actions=["s3:*"],
            resources=[*own, *(f"{b}/*" for b in own)],
        )
    )
    return statements


def _no_statements(_scope: Construct, _ctx: AddonContext) -> list[iam.PolicyStatement]:
    return []


def accepted_wildcards(name: str, ctx: AddonContext) -> Mapping[str, str]:
    """cdk-nag IAM5 findings kvtier accepts for an add-on's extra statements, with why."""
    if name != "aws-mountpoint-s3-csi-driver":
        return {}
    if ctx.bucket_access == "tagged":
        why = (
            "Read-only, only in this account, and only on buckets whose owner enabled S3 ABAC and tagged them for this "
            "environment (aws:ResourceTag condition); kvtier's own buckets are denied."
        )
        return {
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::*]": why,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::*/*]": why,
        }
    return {
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{bucket}/*]": "Read-only objects of a model bucket "
        "a LOB file names (weights are read by key)."
        for bucket in ctx.model_buckets
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
        context: AddonContext | None = None,
        resolve_conflicts: str = "OVERWRITE",
    ) -> None:
        """`resolve_conflicts`: OVERWRITE on kvtier's own cluster (nothing else installed them); PRESERVE on an
        owner's cluster, where a self-managed copy already there must fail the create, not be taken over
        (EKS CreateAddon `resolveConflicts`, docs/references.md "Issue 26")."""
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
                ctx = context or AddonContext()
                for statement in EXTRA_STATEMENTS.get(spec.name, _no_statements)(self, ctx):
                    role.add_to_policy(statement)
                documented = f"The AWS managed policy EKS documents for {spec.name}."
                acknowledge_all(
                    role,
                    {
                        **{managed_policy(p): documented for p in spec.managed_policies},
                        **accepted_wildcards(spec.name, ctx),
                    },
                )
                self.roles[spec.name] = role
                role_arn = role.role_arn
            outputs.releases.append(addon_release(spec))
            self.addons[spec.name] = eks.CfnAddon(
                self,
                _pascal(spec.name),
                addon_name=spec.name,
                addon_version=spec.version,
                cluster_name=eks_cluster.icluster.cluster_name,
                resolve_conflicts=resolve_conflicts,
                service_account_role_arn=role_arn,
                configuration_values=json.dumps(spec.configuration, sort_keys=True) if spec.configuration else None,
            )


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))
