"""A LOB's EKS Pod Identity role: read access to its own S3 model prefixes, and nothing else; and the KMS grants of
model buckets encrypted with a customer managed key (SSE-KMS), shared with the S3 CSI driver's role."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

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
    by_endpoint = [e.s3_sources() for e in lob.endpoints]
    return [s for sources in by_endpoint for _, s in sources if isinstance(s, S3Model)] + [
        s for sources in by_endpoint for _, s in sources if isinstance(s, S3Adapter)
    ]


@dataclass(frozen=True, order=True)
class ModelKey:
    """A model bucket's SSE-KMS key, and the region of the bucket (S3 there calls KMS for the reader)."""

    arn: str
    bucket_region: str


def model_keys(lobs: Iterable[LineOfBusiness], region: str) -> tuple[ModelKey, ...]:
    """The keys the LOBs' S3 sources name (issue 37), each once; `region`: the environment's (a source's default)."""
    found = {ModelKey(s.kms_key_arn, s.region or region) for lob in lobs for s in s3_models(lob) if s.kms_key_arn}
    return tuple(sorted(found))


def decrypt_statements(scope: Construct, keys: Iterable[ModelKey], sid: str) -> list[iam.PolicyStatement]:
    """kms:Decrypt on exactly these keys, and only through S3 in the bucket's region (kms:ViaService): the role can
    read SSE-KMS objects through S3 but cannot decrypt with the key directly. One statement per region. What S3
    needs to download an SSE-KMS object, and the condition key: docs/references.md "Issue 37"."""
    by_region: dict[str, list[str]] = {}
    for key in keys:
        by_region.setdefault(key.bucket_region, []).append(key.arn)
    suffix = Stack.of(scope).url_suffix
    return [
        iam.PolicyStatement(
            sid=f"{sid}{''.join(part.capitalize() for part in region.split('-'))}",
            actions=["kms:Decrypt"],
            resources=sorted(set(arns)),
            conditions={"StringEquals": {"kms:ViaService": f"s3.{region}.{suffix}"}},
        )
        for region, arns in sorted(by_region.items())
    ]


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
        for statement in decrypt_statements(self, model_keys([lob], Stack.of(self).region), "DecryptModels"):
            self.role.add_to_policy(statement)
        eks.CfnPodIdentityAssociation(
            self,
            "Association",
            cluster_name=cluster_name,
            namespace=lob_namespace(lob.name),
            service_account=MODEL_READER_SA,
            role_arn=self.role.role_arn,
        )
