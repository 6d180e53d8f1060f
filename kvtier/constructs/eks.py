"""The EKS control plane of a kvtier environment: no Auto Mode, no managed node groups (HyperPod brings nodes)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import cast

from aws_cdk import Fn, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.constructs.irsa import irsa_principal
from kvtier.constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge, acknowledge_all, managed_policy
from kvtier.versions import KUBERNETES_VERSION

ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"


ADMIN_ENTRY_PREFIX = "Principal"  # + 10 hex of the ARN's SHA-256; logical id `EksPrincipal<hex><CDK path hash>`


def admin_entry_ids(admins: Sequence[str], index_keyed: Sequence[str] = ()) -> dict[str, str]:
    """Principal -> the construct id of its access entry: derived from the ARN, so adding, removing or reordering
    admins touches only those principals. `PrincipalArn` is create-only and EKS allows one entry per principal, so an
    entry whose principal changed under the same id is created before the old one is deleted and fails with 409
    (docs/references.md "Issue 37"). A principal listed in `eks.index_keyed_admins` (an environment first deployed by
    a kvtier that keyed entries by list position) keeps `Admin<position>`, the id it was deployed with, so the
    upgrade replaces no entry. `KVTIER_ADMIN_IDS_BREAK=index` restores the old ids (list positions)."""
    if os.environ.get("KVTIER_ADMIN_IDS_BREAK") == "index":
        return {principal: f"Admin{index}" for index, principal in enumerate(admins)}
    return {
        principal: (
            f"Admin{index_keyed.index(principal)}"
            if principal in index_keyed
            else f"{ADMIN_ENTRY_PREFIX}{hashlib.sha256(principal.encode()).hexdigest()[:10]}"
        )
        for principal in admins
    }


class KvtierEks(Construct):
    """EKS with API_AND_CONFIG_MAP auth, all control-plane logs, KMS-encrypted secrets, IAM OIDC provider."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        env: Environment,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        node_security_group: ec2.ISecurityGroup,
    ) -> None:
        super().__init__(scope, id)
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"EKS secrets envelope encryption, {env.name}",
        )
        self.kubectl_layer = KubectlV34Layer(self, "KubectlLayer")  # kubectl + helm, shared by our handlers
        private_only = env.eks.endpoint_access == "private"
        endpoint = (
            eks.EndpointAccess.PRIVATE
            if private_only
            else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*env.eks.public_access_cidrs)
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=env.eks_cluster_name,
            version=eks.KubernetesVersion.of(KUBERNETES_VERSION),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=list(subnets))],
            # Auto Mode off, no node groups: every node is a HyperPod node (design "Nodes").
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            # vpc-cni, kube-proxy and coredns come as managed add-ons with one owner (addons.py).
            bootstrap_self_managed_addons=False,
            bootstrap_cluster_creator_admin_permissions=False,
            endpoint_access=endpoint,
            security_group=node_security_group,
            secrets_encryption_key=self.secrets_key,
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            # aws_eks_v2 runs the kubectl handler in the cluster's private subnets whenever private access is on.
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=self.kubectl_layer),
            output_config_command=False,
        )
        # HyperPod's EKS prerequisites use both access entries and the aws-auth ConfigMap
        # (reference aws-hyperpod.md 8, item 4); CDK's v2 default is API only.
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, eks.CfnCluster)
        cfn_cluster.add_property_override("AccessConfig.AuthenticationMode", "API_AND_CONFIG_MAP")

        # jsii's Python types do not let mypy see that Cluster implements ICluster.
        self.icluster = cast(eks.ICluster, self.cluster)
        self._acknowledge_cdk_managed_parts()
        self.oidc_provider = eks.OidcProviderNative(
            self, "OidcProvider", url=self.cluster.cluster_open_id_connect_issuer_url
        )
        self._issuer = Fn.select(1, Fn.split("https://", self.cluster.cluster_open_id_connect_issuer_url))
        entry_ids = admin_entry_ids(env.eks.admins, env.eks.index_keyed_admins)
        self.admin_entries = [
            eks.AccessEntry(
                self,
                entry_ids[principal],
                cluster=self.icluster,
                principal=principal,
                access_policies=[
                    eks.AccessPolicy.from_access_policy_name(
                        ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                    )
                ],
            )
            for principal in env.eks.admins
        ]

    def _acknowledge_cdk_managed_parts(self) -> None:
        """Findings on what aws_eks_v2 itself creates: the cluster service role and the kubectl provider."""
        acknowledge(
            self.cluster,
            managed_policy("AmazonEKSClusterPolicy"),
            "The EKS cluster service role needs this AWS managed policy; EKS documents no customer-managed equivalent.",
        )
        provider = self.cluster.node.find_child("KubectlProvider")
        handler = provider.node.find_child("Handler")
        stack = Stack.of(self)
        handler_id = stack.get_logical_id(handler.node.default_child)  # type: ignore[arg-type]
        reasons = {
            LAMBDA_BASIC: "CDK's kubectl provider Lambda: basic execution role for its logs.",
            LAMBDA_VPC: "CDK's kubectl provider Lambda runs in the VPC for a private endpoint.",
            managed_policy("AmazonEC2ContainerRegistryReadOnly"): "CDK's kubectl handler pulls Helm charts from ECR.",
            'AwsSolutions-IAM4[Policy::{"Fn::If":["EksClusterKubectlProviderHandlerHasEcrPublicC426D1A5",{"Fn::Join":'
            '["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},'
            '{"Ref":"AWS::NoValue"}]}]': "CDK's kubectl handler may pull public ECR charts.",
            "AwsSolutions-L1": "The kubectl provider runtime is chosen by aws-cdk-lib, which is pinned.",
            f"AwsSolutions-IAM5[Resource::<{handler_id}.Arn>:*]": "CDK's provider framework invokes its handler's versions.",
        }
        acknowledge_all(self.cluster, reasons)

    def service_account_principal(self, id: str, namespace: str, service_account: str) -> iam.IPrincipal:
        """Trust for one Kubernetes service account through the cluster's OIDC provider (IRSA)."""
        return irsa_principal(
            self,
            id,
            provider_arn=self.oidc_provider.open_id_connect_provider_arn,
            issuer=self._issuer,
            namespace=namespace,
            service_account=service_account,
        )
