"""A LOB's EKS Pod Identity role: read access to its own S3 model prefixes, and nothing else."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.config.adapters import S3Adapter
from kvtier.config.endpoint import S3Model
from kvtier.config.lob import LineOfBusiness
from kvtier.constructs.nag import acknowledge
from kvtier.naming import MODEL_READER_SA, lob_namespace


def s3_models(lob: LineOfBusiness) -> list[S3Model | S3Adapter]:
    """Every S3 prefix the LOB's pods read weights from: the endpoints' models and their LoRA adapters (issue 35)."""
    models: list[S3Model | S3Adapter] = [e.model for e in lob.endpoints if isinstance(e.model, S3Model)]
    adapters = [a.source for e in lob.endpoints for a in e.adapters if isinstance(a.source, S3Adapter)]
    return [*models, *adapters]


class ModelReaderRole(Construct):
    """Role assumed through EKS Pod Identity by the LOB's `model-reader` service account."""

    def __init__(self, scope: Construct, id: str, *, lob: LineOfBusiness, cluster_name: str) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self,
            "Role",
            # Only this LOB's service account on this cluster: the session tags EKS Pod Identity sets (EKS user
            # guide pod-id-role and pod-id-abac; docs/references.md "Issue 26").
            assumed_by=iam.ServicePrincipal(
                "pods.eks.amazonaws.com",
                conditions={
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-name": cluster_name,
                        "aws:RequestTag/kubernetes-namespace": lob_namespace(lob.name),
                        "aws:RequestTag/kubernetes-service-account": MODEL_READER_SA,
                    }
                },
            ).with_session_tags(),
            description=f"kvtier LOB {lob.name}: read its model prefixes in S3",
        )
        partition = Stack.of(self).partition
        for index, model in enumerate(s3_models(lob)):
            prefix = model.prefix.rstrip("/")
            self.role.add_to_policy(
                iam.PolicyStatement(
                    sid=f"ReadModel{index}",
                    actions=["s3:GetObject"],
                    resources=[f"arn:{partition}:s3:::{model.bucket}/{prefix}/*"],
                )
            )
            self.role.add_to_policy(
                iam.PolicyStatement(
                    sid=f"ListModel{index}",
                    actions=["s3:ListBucket"],
                    resources=[f"arn:{partition}:s3:::{model.bucket}"],
                    conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
                )
            )
            acknowledge(
                self.role,
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{model.bucket}/{prefix}/*]",
                "Objects under this LOB's own model prefix only.",
            )
        eks.CfnPodIdentityAssociation(
            self,
            "Association",
            cluster_name=cluster_name,
            namespace=lob_namespace(lob.name),
            service_account=MODEL_READER_SA,
            role_arn=self.role.role_arn,
        )
