"""The HyperPod Inference Operator: the EKS add-on `amazon-sagemaker-hyperpod-inference`, its IAM roles and the TLS
certificate bucket (docs/references.md "Inference Operator add-on and IAM").

The add-on installs the operator, its ALB controller and KEDA in `hyperpod-inference-system`; each gets its role
through IRSA here. The prerequisite add-ons (cert-manager, S3 and FSx CSI drivers, metrics-server) belong to the
cluster stack (kvtier/constructs/eks_addons.py).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Fn, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.addons import addon
from kvtier.config.environment import Environment
from kvtier.constructs.buckets import private_bucket
from kvtier.constructs.irsa import irsa_principal
from kvtier.constructs.manifests import StackOutputs, addon_release
from kvtier.constructs.nag import acknowledge, acknowledge_all, managed_policy
from kvtier.naming import INFERENCE_EXECUTION_ROLE_PREFIX, inference_role_names
from kvtier.upstream import ALB_POLICY_SOURCE, COMMERCIAL_ARN, alb_policy, alb_policy_for_partition

ADDON = "amazon-sagemaker-hyperpod-inference"
NAMESPACE = "hyperpod-inference-system"
# Service accounts the add-on creates (helm_to_addon.sh trust policies, HPCLI@011ca927).
CONTROLLER_SA = "hyperpod-inference-controller-manager"
ALB_SA = "aws-load-balancer-controller"
KEDA_SA = "keda-operator"
GATED_SA_PATTERN = "hyperpod-inference-service-account*"  # per-endpoint SAs in any namespace
EXECUTION_ROLE_PREFIX = INFERENCE_EXECUTION_ROLE_PREFIX
EXECUTION_POLICY = "AmazonSageMakerHyperPodInferenceAccess"
GATED_POLICY = "AmazonSageMakerHyperPodGatedModelAccess"
ROLE_NAME_MAX = 64  # IAM
ALB_POLICY_NAME = "AWSLoadBalancerController"  # the inline policy holding the upstream document


def role_names(env: str, region: str) -> dict[str, str]:
    """Explicit role names (kvtier.naming), each checked against IAM's length limit."""
    names = inference_role_names(env, region)
    for name in names.values():
        if len(name) > ROLE_NAME_MAX:
            raise ValueError(f"IAM role name '{name}' has {len(name)} characters; IAM allows {ROLE_NAME_MAX}")
    return names


def _alb_policy(partition: str) -> iam.PolicyDocument:
    """The AWS Load Balancer Controller's own policy at the version the add-on bundles, unchanged but for the
    partition (kvtier/upstream; docs/references.md). A hand-written subset misses actions the controller calls by
    default (WAF, Shield, node security group rules), and then it creates the ALB but never writes the Ingress address."""
    return iam.PolicyDocument.from_json(alb_policy_for_partition(partition))


def _wildcard_resources() -> list[str]:
    """The upstream document's wildcard resources as cdk-nag names them (the partition as `<AWS::Partition>`)."""
    found: list[str] = []
    for statement in alb_policy()["Statement"]:
        resources = statement.get("Resource", [])
        for resource in [resources] if isinstance(resources, str) else resources:
            named = alb_policy_for_partition_name(resource)
            if "*" in named and named not in found:
                found.append(named)
    return found


def alb_policy_for_partition_name(resource: str) -> str:
    return resource.replace(COMMERCIAL_ARN, "arn:<AWS::Partition>:", 1)


class InferenceOperator(Construct):
    """Roles, TLS bucket and the add-on. `oidc_provider_arn` may be a token or an existing cluster's ARN."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        env: Environment,
        cluster: eks.ICluster,
        oidc_provider_arn: str,
        hyperpod_cluster_arn: str,
        outputs: StackOutputs,
    ) -> None:
        super().__init__(scope, id)
        self._provider_arn = oidc_provider_arn
        # `arn:aws:iam::<account>:oidc-provider/<issuer>`: the issuer prefixes IRSA condition keys.
        self._issuer = Fn.select(1, Fn.split(":oidc-provider/", oidc_provider_arn))
        stack = Stack.of(self)
        names = role_names(env.name, env.region)
        spec = addon(ADDON)

        self.tls_bucket = private_bucket(
            self, "TlsBucket", versioned=True
        )  # endpoint certificates, re-issued by the operator
        acknowledge(
            self.tls_bucket,
            "AwsSolutions-S1",
            "Holds only the operator's endpoint TLS certificates; CloudTrail records who reads them.",
        )

        # SageMaker may assume the operator's roles only on behalf of this account's resources (confused deputy).
        sagemaker = iam.ServicePrincipal(
            "sagemaker.amazonaws.com",
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:*"},
            },
        )
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            role_name=names["execution"],
            assumed_by=iam.CompositePrincipal(sagemaker, self._irsa("ExecutionTrust", NAMESPACE, CONTROLLER_SA)),
            description=f"HyperPod Inference Operator execution role, kvtier {env.name}",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(EXECUTION_POLICY)],
        )
        self._grant_tls_bucket(self.execution_role)
        tls_objects = f"AwsSolutions-IAM5[Resource::<{stack.get_logical_id(self.tls_bucket.node.default_child)}.Arn>/*]"  # type: ignore[arg-type]
        acknowledge_all(
            self.execution_role,
            {
                tls_objects: "The operator names certificate objects per endpoint.",
                managed_policy(EXECUTION_POLICY): "The operator's documented AWS policy.",
            },
        )

        self.gated_role = iam.Role(
            self,
            "GatedModelRole",
            role_name=names["gated"],
            assumed_by=iam.CompositePrincipal(sagemaker, self._irsa("GatedTrust", "*", GATED_SA_PATTERN, like=True)),
            description=f"HyperPod Inference JumpStart gated-model downloads, kvtier {env.name}",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(GATED_POLICY)],
        )
        acknowledge(self.gated_role, managed_policy(GATED_POLICY), "The operator's documented AWS policy.")

        self.alb_role = iam.Role(
            self,
            "AlbControllerRole",
            role_name=names["alb"],
            assumed_by=self._irsa("AlbTrust", NAMESPACE, ALB_SA),
            description=f"AWS Load Balancer Controller of the HyperPod Inference add-on, kvtier {env.name}",
            inline_policies={ALB_POLICY_NAME: _alb_policy(stack.partition)},
        )
        alb_reason = (
            f"The AWS Load Balancer Controller's upstream policy ({ALB_POLICY_SOURCE}), unchanged: it creates and tags "
            "resources whose names it does not know in advance; writes carry its elbv2.k8s.aws/cluster tag conditions."
        )
        acknowledge_all(self.alb_role, {f"AwsSolutions-IAM5[Resource::{r}]": alb_reason for r in _wildcard_resources()})

        self.keda_role = iam.Role(
            self,
            "KedaRole",
            role_name=names["keda"],
            assumed_by=self._irsa("KedaTrust", NAMESPACE, KEDA_SA),  # only KEDA's pods; SageMaker never assumes it
            description=f"KEDA of the HyperPod Inference add-on (autoscaling metrics), kvtier {env.name}",
        )
        self.keda_role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadCloudWatchMetrics",
                actions=["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"],
                resources=["*"],  # CloudWatch metric reads have no resource-level permissions
            )
        )
        self.keda_role.add_to_policy(
            iam.PolicyStatement(
                sid="QueryPrometheus",
                actions=["aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"],
                resources=[f"arn:{stack.partition}:aps:{stack.region}:{stack.account}:workspace/*"],
            )
        )
        keda_reason = (
            "KEDA reads the metrics each endpoint's trigger names: CloudWatch reads have no resource-level "
            "permissions; Prometheus queries are limited to this account's AMP workspaces in this region."
        )
        account = "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account
        keda_resources = ("*", f"arn:<AWS::Partition>:aps:{stack.region}:{account}:workspace/*")
        acknowledge_all(self.keda_role, {f"AwsSolutions-IAM5[Resource::{r}]": keda_reason for r in keda_resources})

        self.configuration: dict[str, Any] = {
            "executionRoleArn": self.execution_role.role_arn,
            "tlsCertificateS3Bucket": self.tls_bucket.bucket_name,
            "hyperpodClusterArn": hyperpod_cluster_arn,
            "jumpstartGatedModelDownloadRoleArn": self.gated_role.role_arn,
            "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": self.alb_role.role_arn}},
            "keda": {"enabled": True, "auth": {"aws": {"irsa": {"enabled": True, "roleArn": self.keda_role.role_arn}}}},
        }
        self.addon = eks.CfnAddon(
            self,
            "Addon",
            addon_name=spec.name,
            addon_version=spec.version,
            cluster_name=cluster.cluster_name,
            resolve_conflicts="OVERWRITE",
            configuration_values=stack.to_json_string(self.configuration),
        )
        outputs.releases.append(
            addon_release(
                spec,
                {
                    "executionRoleArn": f"<role {names['execution']}>",
                    "tlsCertificateS3Bucket": "<TLS bucket of this stack>",
                    "hyperpodClusterArn": "<HyperPod cluster of this environment>",
                    "jumpstartGatedModelDownloadRoleArn": f"<role {names['gated']}>",
                    "alb": {"enabled": True, "serviceAccount": {"create": True, "roleArn": f"<role {names['alb']}>"}},
                    "keda": {
                        "enabled": True,
                        "auth": {"aws": {"irsa": {"enabled": True, "roleArn": f"<role {names['keda']}>"}}},
                    },
                },
            )
        )

    def _irsa(self, id: str, namespace: str, service_account: str, *, like: bool = False) -> iam.IPrincipal:
        return irsa_principal(
            self,
            id,
            provider_arn=self._provider_arn,
            issuer=self._issuer,
            namespace=namespace,
            service_account=service_account,
            like=like,
        )

    def _grant_tls_bucket(self, role: iam.Role) -> None:
        """The reference's inline TLSBucketsAccess: read, and write/delete only within this account."""
        bucket = self.tls_bucket
        role.add_to_policy(
            iam.PolicyStatement(sid="TlsBucketList", actions=["s3:ListBucket"], resources=[bucket.bucket_arn])
        )
        role.add_to_policy(
            iam.PolicyStatement(sid="TlsBucketRead", actions=["s3:GetObject"], resources=[bucket.arn_for_objects("*")])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TlsBucketWrite",
                actions=["s3:PutObject", "s3:PutObjectTagging", "s3:DeleteObject"],
                resources=[bucket.arn_for_objects("*")],
                conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}},
            )
        )
