"""The HyperPod Inference Operator: the EKS add-on `amazon-sagemaker-hyperpod-inference`, its IAM roles and the TLS
certificate bucket (docs/references.md "Inference Operator add-on and IAM").

The add-on installs the operator, its ALB controller and KEDA in `hyperpod-inference-system`; each gets its role
through IRSA here. The prerequisite add-ons (cert-manager, S3 and FSx CSI drivers, metrics-server) belong to the
cluster stack (kvtier/constructs/addons.py).
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
from kvtier.constructs.nag import acknowledge, managed_policy

ADDON = "amazon-sagemaker-hyperpod-inference"
NAMESPACE = "hyperpod-inference-system"
# Service accounts the add-on creates (helm_to_addon.sh trust policies, HPCLI@011ca927).
CONTROLLER_SA = "hyperpod-inference-controller-manager"
ALB_SA = "aws-load-balancer-controller"
KEDA_SA = "keda-operator"
GATED_SA_PATTERN = "hyperpod-inference-service-account*"  # per-endpoint SAs in any namespace
EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"  # required by the add-on (_validateRequiredValues.tpl)
EXECUTION_POLICY = "AmazonSageMakerHyperPodInferenceAccess"
GATED_POLICY = "AmazonSageMakerHyperPodGatedModelAccess"
ROLE_NAME_MAX = 64  # IAM


def role_names(env: str, region: str) -> dict[str, str]:
    """Explicit role names (IAM names are per account: env and region keep environments apart)."""
    names = {
        "execution": f"{EXECUTION_ROLE_PREFIX}-{env}-{region}",
        "gated": f"kvtier-{env}-{region}-inference-gated",
        "alb": f"kvtier-{env}-{region}-inference-alb",
        "keda": f"kvtier-{env}-{region}-inference-keda",
    }
    for name in names.values():
        if len(name) > ROLE_NAME_MAX:
            raise ValueError(f"IAM role name '{name}' has {len(name)} characters; IAM allows {ROLE_NAME_MAX}")
    return names


def _alb_statements(partition: str) -> list[iam.PolicyStatement]:
    """What the AWS Load Balancer Controller does for the operator's ALBs (kvtier's own writing of the controller's
    documented policy: reads, its own security groups, and only load balancers it tagged)."""
    cluster_tag = "aws:ResourceTag/elbv2.k8s.aws/cluster"
    request_tag = "aws:RequestTag/elbv2.k8s.aws/cluster"
    return [
        iam.PolicyStatement(
            sid="ElbServiceLinkedRole",
            actions=["iam:CreateServiceLinkedRole"],
            resources=["*"],
            conditions={"StringEquals": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}},
        ),
        iam.PolicyStatement(
            sid="Describe",
            actions=[
                "ec2:DescribeAccountAttributes",
                "ec2:DescribeAddresses",
                "ec2:DescribeAvailabilityZones",
                "ec2:DescribeInternetGateways",
                "ec2:DescribeVpcs",
                "ec2:DescribeVpcPeeringConnections",
                "ec2:DescribeSubnets",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeInstances",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeTags",
                "ec2:DescribeRouteTables",
                "ec2:GetSecurityGroupsForVpc",
                "elasticloadbalancing:DescribeLoadBalancers",
                "elasticloadbalancing:DescribeLoadBalancerAttributes",
                "elasticloadbalancing:DescribeListeners",
                "elasticloadbalancing:DescribeListenerAttributes",
                "elasticloadbalancing:DescribeListenerCertificates",
                "elasticloadbalancing:DescribeSSLPolicies",
                "elasticloadbalancing:DescribeRules",
                "elasticloadbalancing:DescribeTargetGroups",
                "elasticloadbalancing:DescribeTargetGroupAttributes",
                "elasticloadbalancing:DescribeTargetHealth",
                "elasticloadbalancing:DescribeTags",
                "acm:ListCertificates",
                "acm:DescribeCertificate",
            ],
            resources=["*"],  # Describe/List actions have no resource-level permissions
        ),
        iam.PolicyStatement(
            sid="CreateSecurityGroups",
            actions=["ec2:CreateSecurityGroup"],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="TagNewSecurityGroups",
            actions=["ec2:CreateTags"],
            resources=[f"arn:{partition}:ec2:*:*:security-group/*"],
            conditions={
                "StringEquals": {"ec2:CreateAction": "CreateSecurityGroup"},
                "Null": {request_tag: "false"},
            },
        ),
        iam.PolicyStatement(
            sid="ManageOwnSecurityGroups",
            actions=[
                "ec2:CreateTags",
                "ec2:DeleteTags",
                "ec2:AuthorizeSecurityGroupIngress",
                "ec2:RevokeSecurityGroupIngress",
                "ec2:DeleteSecurityGroup",
            ],
            resources=[f"arn:{partition}:ec2:*:*:security-group/*"],
            conditions={"Null": {cluster_tag: "false"}},
        ),
        iam.PolicyStatement(
            sid="CreateTaggedLoadBalancers",
            actions=["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup"],
            resources=["*"],
            conditions={"Null": {request_tag: "false"}},
        ),
        iam.PolicyStatement(
            sid="TagOnCreate",
            actions=["elasticloadbalancing:AddTags"],
            resources=[
                f"arn:{partition}:elasticloadbalancing:*:*:targetgroup/*/*",
                f"arn:{partition}:elasticloadbalancing:*:*:loadbalancer/app/*/*",
            ],
            conditions={
                "StringEquals": {"elasticloadbalancing:CreateAction": ["CreateTargetGroup", "CreateLoadBalancer"]}
            },
        ),
        iam.PolicyStatement(
            sid="ManageOwnLoadBalancers",
            actions=[
                "elasticloadbalancing:AddTags",
                "elasticloadbalancing:RemoveTags",
                "elasticloadbalancing:ModifyLoadBalancerAttributes",
                "elasticloadbalancing:SetIpAddressType",
                "elasticloadbalancing:SetSecurityGroups",
                "elasticloadbalancing:SetSubnets",
                "elasticloadbalancing:DeleteLoadBalancer",
                "elasticloadbalancing:ModifyTargetGroup",
                "elasticloadbalancing:ModifyTargetGroupAttributes",
                "elasticloadbalancing:DeleteTargetGroup",
            ],
            resources=[
                f"arn:{partition}:elasticloadbalancing:*:*:targetgroup/*/*",
                f"arn:{partition}:elasticloadbalancing:*:*:loadbalancer/app/*/*",
            ],
            conditions={"Null": {cluster_tag: "false"}},
        ),
        iam.PolicyStatement(
            sid="ListenersRulesTargets",
            actions=[
                "elasticloadbalancing:CreateListener",
                "elasticloadbalancing:DeleteListener",
                "elasticloadbalancing:ModifyListener",
                "elasticloadbalancing:AddListenerCertificates",
                "elasticloadbalancing:RemoveListenerCertificates",
                "elasticloadbalancing:CreateRule",
                "elasticloadbalancing:DeleteRule",
                "elasticloadbalancing:ModifyRule",
                "elasticloadbalancing:SetRulePriorities",
                "elasticloadbalancing:RegisterTargets",
                "elasticloadbalancing:DeregisterTargets",
            ],
            resources=[
                f"arn:{partition}:elasticloadbalancing:*:*:loadbalancer/app/*/*",
                f"arn:{partition}:elasticloadbalancing:*:*:listener/app/*/*/*",
                f"arn:{partition}:elasticloadbalancing:*:*:listener-rule/app/*/*/*",
                f"arn:{partition}:elasticloadbalancing:*:*:targetgroup/*/*",
            ],
        ),
    ]


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

        self.tls_bucket = private_bucket(self, "TlsBucket")  # endpoint certificates, re-issued by the operator
        acknowledge(
            self.tls_bucket,
            "AwsSolutions-S1",
            "Holds only the operator's endpoint TLS certificates; CloudTrail records who reads them.",
        )

        # SageMaker may assume the operator's roles only on behalf of this account's resources (confused deputy).
        sagemaker = iam.ServicePrincipal(
            "sagemaker.amazonaws.com",
            conditions={
                "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:*"}
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
        acknowledge(self.execution_role, tls_objects, "The operator names certificate objects per endpoint.")
        acknowledge(self.execution_role, managed_policy(EXECUTION_POLICY), "The operator's documented AWS policy.")

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
        )
        for statement in _alb_statements(stack.partition):
            self.alb_role.add_to_policy(statement)
        alb_reason = (
            "The load balancer controller creates and tags resources whose names it does not know in advance; writes "
            "are limited to resources carrying its elbv2.k8s.aws/cluster tag where the API allows conditions."
        )
        for resource in (
            "*",
            "arn:<AWS::Partition>:ec2:*:*:security-group/*",
            "arn:<AWS::Partition>:elasticloadbalancing:*:*:targetgroup/*/*",
            "arn:<AWS::Partition>:elasticloadbalancing:*:*:loadbalancer/app/*/*",
            "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener/app/*/*/*",
            "arn:<AWS::Partition>:elasticloadbalancing:*:*:listener-rule/app/*/*/*",
        ):
            acknowledge(self.alb_role, f"AwsSolutions-IAM5[Resource::{resource}]", alb_reason)

        self.keda_role = iam.Role(
            self,
            "KedaRole",
            role_name=names["keda"],
            assumed_by=iam.CompositePrincipal(sagemaker, self._irsa("KedaTrust", NAMESPACE, KEDA_SA)),
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
        for resource in ("*", f"arn:<AWS::Partition>:aps:{stack.region}:{account}:workspace/*"):
            acknowledge(self.keda_role, f"AwsSolutions-IAM5[Resource::{resource}]", keda_reason)

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
