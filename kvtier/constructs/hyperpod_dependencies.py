"""HyperPod dependencies (health agents, device plugins, training operators) installed before any node exists."""

from __future__ import annotations

import json
from collections.abc import Sequence

from aws_cdk import CustomResource, Duration, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from kvtier.constructs.eks import ADMIN_POLICY
from kvtier.constructs.lambda_code import package_code
from kvtier.constructs.nag import LAMBDA_BASIC, LAMBDA_VPC, acknowledge_all

HANDLER = "eks_api.installer.on_event"  # kvtier/lambdas/eks_api/installer.py

# Pinned upstream source of the chart (its README: install before the cluster; docs/references.md "Foundation").
REPOSITORY = "aws/sagemaker-hyperpod-cli"
COMMIT = "011ca927123e02b35a399935bbb3ab1905fe33c7"  # main on 2026-06-22
CHART_PATH = "helm_chart/HyperPodHelmChart"
RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"


class HyperPodDependencies(Construct):
    """A Lambda-backed custom resource running `helm upgrade --install` of the pinned chart, without waiting."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        region: str,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        vpc: ec2.IVpc,
        kubectl_layer: lambda_.ILayerVersion,
        values: dict[str, object] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.function = lambda_.Function(
            self,
            "Installer",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler=HANDLER,
            code=package_code("eks_api"),
            layers=[kubectl_layer],  # helm at /opt/helm/helm
            timeout=Duration.minutes(14),
            memory_size=1024,
            ephemeral_storage_size=Size.gibibytes(2),
            # In the VPC so a private-only API endpoint is reachable; egress to GitHub goes through the NAT.
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=list(subnets)),
            security_groups=[security_group],
            log_group=logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_MONTH),
            description="Installs the HyperPod dependencies Helm chart from a pinned commit",
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        # helm installs CRDs and cluster-wide RBAC, which needs cluster-admin.
        self.access_entry = eks.AccessEntry(
            self,
            "Access",
            cluster=cluster,
            principal=self.function.role.role_arn,  # type: ignore[union-attr]
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER)
            ],
        )
        provider = cr.Provider(self, "Provider", on_event_handler=self.function)
        self.resource = CustomResource(
            self,
            "Release",
            service_token=provider.service_token,
            resource_type="Custom::HyperPodDependencies",
            properties={
                "ClusterName": cluster.cluster_name,
                "Region": region,
                "Repository": REPOSITORY,
                "Commit": COMMIT,
                "ChartPath": CHART_PATH,
                "ReleaseName": RELEASE,
                "Namespace": NAMESPACE,
                # Installed before any node exists, the health agent cannot read the region from node labels and
                # falls back to us-east-1 images unless told (charts/health-monitoring-agent/templates/_helpers.tpl).
                "Values": json.dumps({"global": {"region": region}, **(values or {})}, sort_keys=True),
            },
        )
        self.resource.node.add_dependency(self.access_entry)
        installer_id = Stack.of(self).get_logical_id(self.function.node.default_child)  # type: ignore[arg-type]
        acknowledge_all(
            self,
            {
                LAMBDA_BASIC: "Lambda basic execution role: writes only its own logs.",
                LAMBDA_VPC: "The installer runs in the VPC to reach a private-only EKS endpoint.",
                "AwsSolutions-L1": "The provider framework's runtime is chosen by aws-cdk-lib, which is pinned.",
                f"AwsSolutions-IAM5[Resource::<{installer_id}.Arn>:*]": "The provider framework invokes its handler's versions.",
            },
        )
