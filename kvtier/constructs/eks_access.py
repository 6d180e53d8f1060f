"""Access to the environment's EKS cluster from CDK, whichever kind: the interface the stacks use, and the import of a
cluster kvtier did not create.

`KvtierEks` (kvtier.constructs.eks) creates a cluster; `ExistingEks` imports one. Both give the stacks the same
things: the `ICluster` that manifests and Helm charts are applied to (with a kubectl provider), IRSA trust for a
service account, and the kubectl layer.
"""

from __future__ import annotations

from typing import Protocol, cast

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.config.hyperpod import ExistingCluster
from kvtier.constructs.eks import ADMIN_POLICY
from kvtier.constructs.irsa import irsa_principal
from kvtier.constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge_all, managed_policy


class EksAccess(Protocol):
    """What the cluster, platform and LOB stacks need from the EKS cluster, created or imported."""

    @property
    def icluster(self) -> eks.ICluster: ...

    @property
    def kubectl_layer(self) -> lambda_.ILayerVersion: ...

    def service_account_principal(self, id: str, namespace: str, service_account: str) -> iam.IPrincipal: ...


class ExistingEks(Construct):
    """An imported EKS cluster with a kubectl provider of kvtier's own, in the owner's VPC.

    aws-cdk-lib 2.275.0's imported cluster ignores `kubectl_provider_options` (it reads only `kubectl_provider`), so
    the provider is built here against a first import and handed to the import the stacks use.
    """

    def __init__(self, scope: Construct, id: str, *, env: Environment, existing: ExistingCluster) -> None:
        super().__init__(scope, id)
        self.existing = existing
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=existing.vpc_id, availability_zones=list(env.availability_zones)
        )
        self.subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{index}", subnet_id)
            for index, subnet_id in enumerate(existing.subnet_ids)
        ]
        self.security_group = ec2.SecurityGroup.from_security_group_id(
            self, "SecurityGroup", existing.security_group_id, mutable=False
        )
        self._kubectl_layer = KubectlV34Layer(self, "KubectlLayer")  # kubectl + helm, shared by our handlers
        self.oidc_provider = eks.OidcProviderNative.from_oidc_provider_arn(
            self, "OidcProvider", existing.oidc_provider_arn
        )
        reference = eks.Cluster.from_cluster_attributes(
            self, "ClusterReference", cluster_name=existing.eks_cluster_name, vpc=self.vpc
        )
        owner_role = (
            iam.Role.from_role_arn(self, "KubectlRole", existing.kubectl_role_arn, mutable=False)
            if existing.kubectl_role_arn
            else None
        )
        self.kubectl_provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=reference,
            kubectl_layer=self._kubectl_layer,
            private_subnets=self.subnets,  # the owner's endpoint may be private: run inside the VPC
            security_groups=[self.security_group],
            role=owner_role,
        )
        self._icluster = eks.Cluster.from_cluster_attributes(
            self,
            "Cluster",
            cluster_name=existing.eks_cluster_name,
            vpc=self.vpc,
            open_id_connect_provider=self.oidc_provider,
            # jsii's Python types do not let mypy see that KubectlProvider implements IKubectlProvider.
            kubectl_provider=cast(eks.IKubectlProvider, self.kubectl_provider),
        )
        # kvtier's own handler role gets cluster-admin through an access entry (HyperPod clusters use API or
        # API_AND_CONFIG_MAP authentication); an owner-provided role must already have it.
        self.kubectl_access: eks.AccessEntry | None = None
        if owner_role is None:
            self.kubectl_access = eks.AccessEntry(
                self,
                "KubectlAccess",
                cluster=self._icluster,
                principal=self.kubectl_provider.role.role_arn,  # type: ignore[union-attr]
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
            self._acknowledge_kubectl_handler()

    @property
    def icluster(self) -> eks.ICluster:
        return self._icluster

    @property
    def kubectl_layer(self) -> lambda_.ILayerVersion:
        return cast(lambda_.ILayerVersion, self._kubectl_layer)

    def service_account_principal(self, id: str, namespace: str, service_account: str) -> iam.IPrincipal:
        """Trust for one Kubernetes service account through the cluster's OIDC provider (IRSA)."""
        return irsa_principal(
            self,
            id,
            provider_arn=self.existing.oidc_provider_arn,
            issuer=self.existing.oidc_issuer,
            namespace=namespace,
            service_account=service_account,
        )

    def _acknowledge_kubectl_handler(self) -> None:
        """Findings on the kubectl provider aws_eks_v2 builds (the same as for a cluster kvtier creates)."""
        stack = Stack.of(self)
        handler = self.kubectl_provider.node.find_child("Handler")
        handler_id = stack.get_logical_id(handler.node.default_child)  # type: ignore[arg-type]
        condition_id = stack.get_logical_id(handler.node.find_child("HasEcrPublic"))  # type: ignore[arg-type]
        public_ecr = (
            f'AwsSolutions-IAM4[Policy::{{"Fn::If":["{condition_id}",{{"Fn::Join":["",["arn:",'
            '{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},'
            '{"Ref":"AWS::NoValue"}]}]'
        )
        reasons = {
            LAMBDA_BASIC: "CDK's kubectl provider Lambda: basic execution role for its logs.",
            LAMBDA_VPC: "CDK's kubectl provider Lambda runs in the owner's VPC to reach a private endpoint.",
            managed_policy("AmazonEC2ContainerRegistryReadOnly"): "CDK's kubectl handler pulls Helm charts from ECR.",
            public_ecr: "CDK's kubectl handler may pull public ECR charts.",
            "AwsSolutions-L1": "The kubectl provider runtime is chosen by aws-cdk-lib, which is pinned.",
            f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]": "CDK's provider framework invokes its handler's versions.",
        }
        acknowledge_all(self, reasons)
