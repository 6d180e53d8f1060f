"""The HyperPod cluster (EKS orchestrator) with its execution role and lifecycle scripts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from kvtier.catalog import InstanceType
from kvtier.config.environment import Environment
from kvtier.config.hyperpod import ROLE_LABEL, InstanceGroup
from kvtier.constructs.buckets import private_bucket
from kvtier.constructs.nag import LAMBDA_BASIC, account, acknowledge, acknowledge_all, managed_policy
from kvtier.naming import lifecycle_bucket_prefix

LIFECYCLE_DIR = Path(__file__).resolve().parent / "lifecycle"
LIFECYCLE_PREFIX = "lifecycle/"
EXECUTION_MANAGED_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"  # reference aws-hyperpod.md 8, item 7
NODE_PROVISIONING_MODE = "Continuous"


def lifecycle_script(group: InstanceGroup) -> str:
    return f"on_create_{group.role}.sh"


def deep_health_checks(instance: InstanceType, mode: str = "always", established: bool = False) -> list[str] | None:
    """Deep health checks valid for the type: connectivity checks need EFA (design "Nodes"). `mode` is the config's
    `hyperpod.deep_health_checks`: `on_create` stops asking for them once the environment is established."""
    if not instance.is_gpu or mode == "off" or (mode == "on_create" and established):
        return None
    return ["InstanceStress", "InstanceConnectivity"] if instance.efa else ["InstanceStress"]


class HyperPodCluster(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        env: Environment,
        eks_cluster_arn: str,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        established: bool = False,
    ) -> None:
        super().__init__(scope, id)
        self._established = established
        stack = Stack.of(self)
        # AWS documents lifecycle sources as s3://sagemaker-... (the prefix its managed policy covers); the explicit
        # grant_read below stays. Account and region keep the global name unique (63 characters at most).
        self.lifecycle_bucket = private_bucket(
            self,
            "LifecycleBucket",
            versioned=True,
            bucket_name=f"{lifecycle_bucket_prefix(env.name)}{stack.account}-{stack.region}",
        )
        self.lifecycle_upload = s3deploy.BucketDeployment(
            self,
            "LifecycleScripts",
            sources=[s3deploy.Source.asset(str(LIFECYCLE_DIR), exclude=["__pycache__", "*.pyc", "*.py"])],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix=LIFECYCLE_PREFIX,
            prune=True,
        )
        self.execution_role = iam.Role(
            self,
            "ExecutionRole",
            # No aws:SourceAccount condition: SageMaker's confused-deputy page does not list HyperPod among the
            # features that send it, AWS's HyperPod templates trust SageMaker unconditioned, and a role cannot be
            # passed across accounts anyway (docs/references.md "Issue 26").
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"HyperPod node execution role, kvtier {env.name}",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(EXECUTION_MANAGED_POLICY)],
        )
        self._grant_node_permissions(eks_cluster_arn)

        source_uri = f"s3://{self.lifecycle_bucket.bucket_name}/{LIFECYCLE_PREFIX}"
        self.cluster = sagemaker.CfnCluster(
            self,
            "Cluster",
            cluster_name=env.hyperpod_cluster_name,
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=eks_cluster_arn)
            ),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id],
                subnets=[s.subnet_id for s in subnets],
            ),
            node_recovery=env.hyperpod.node_recovery,
            # Continuous: a missing ml.g6e instance or one failed node no longer fails CreateCluster and rolls the
            # whole stack back; groups stay InService while HyperPod retries (docs/references.md "Issue 26").
            node_provisioning_mode=NODE_PROVISIONING_MODE,
            tiered_storage_config=sagemaker.CfnCluster.TieredStorageConfigProperty(
                mode="Enable" if env.hyperpod.tiered_storage.enabled else "Disable",
                instance_memory_allocation_percentage=(
                    env.hyperpod.tiered_storage.memory_percent if env.hyperpod.tiered_storage.enabled else None
                ),
            ),
            instance_groups=[self._group(env, g, source_uri) for g in env.hyperpod.instance_groups],
        )
        self.cluster.node.add_dependency(self.lifecycle_upload)
        # Nodes start with the execution role: its inline policy (lifecycle bucket read, ENIs) must exist first.
        default_policy = self.execution_role.node.try_find_child("DefaultPolicy")
        if default_policy is not None:
            self.cluster.node.add_dependency(default_policy)
        self.cluster_arn = self.cluster.attr_cluster_arn
        self._acknowledge()

    def _group(
        self, env: Environment, group: InstanceGroup, source_uri: str
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        instance = env.instance(group.instance_type)
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=group.name,
            instance_type=group.instance_type,
            instance_count=group.count,
            execution_role=self.execution_role.role_arn,
            life_cycle_config=sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
                source_s3_uri=source_uri, on_create=lifecycle_script(group)
            ),
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_gb
                    )
                )
            ],
            on_start_deep_health_checks=deep_health_checks(
                instance, env.hyperpod.deep_health_checks, self._established
            ),
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(
                labels={ROLE_LABEL: group.role},
                taints=[
                    sagemaker.CfnCluster.ClusterKubernetesTaintProperty(
                        key=t.key, value=t.value or None, effect=t.effect
                    )
                    for t in group.taints
                ]
                or None,
            ),
        )

    def _acknowledge(self) -> None:
        bucket_read = {
            "AwsSolutions-IAM5[Action::s3:GetObject*]": "grant_read of the lifecycle bucket only",
            "AwsSolutions-IAM5[Action::s3:GetBucket*]": "grant_read of the lifecycle bucket only",
            "AwsSolutions-IAM5[Action::s3:List*]": "grant_read of the lifecycle bucket only",
            f"AwsSolutions-IAM5[Resource::<{Stack.of(self).get_logical_id(self.lifecycle_bucket.node.default_child)}.Arn>/*]": (  # type: ignore[arg-type]
                "objects of the lifecycle bucket only"
            ),
        }
        acknowledge(
            self.lifecycle_bucket,
            "AwsSolutions-S1",
            "Holds only kvtier's lifecycle scripts, written by CloudFormation and read by the node role; versioned.",
        )
        acknowledge_all(
            self.execution_role,
            {
                managed_policy(EXECUTION_MANAGED_POLICY): "The policy HyperPod documents for node execution roles.",
                "AwsSolutions-IAM5[Resource::*]": "ENI and ECR token actions have no resource-level scoping; "
                "cloudwatch:DescribeAlarms is account-wide.",
                "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:"
                f"{Stack.of(self).region}:{account(self)}:network-interface/*]": "HyperPod tags the node ENIs it creates.",
                **bucket_read,
            },
        )
        # The BucketDeployment handler is a stack-level singleton created by aws-cdk-lib.
        stack = Stack.of(self)
        handler = next(c for c in stack.node.children if c.node.id.startswith("Custom::CDKBucketDeployment"))
        acknowledge_all(
            handler,
            {
                LAMBDA_BASIC: "aws-cdk-lib's BucketDeployment handler writes only its own logs.",
                "AwsSolutions-L1": "The BucketDeployment runtime is chosen by aws-cdk-lib, which is pinned.",
                "AwsSolutions-IAM5[Action::s3:DeleteObject*]": "BucketDeployment prunes old scripts in its bucket.",
                "AwsSolutions-IAM5[Action::s3:Abort*]": "BucketDeployment uploads to its bucket.",
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-{account(self)}-"
                f"{stack.region}/*]": "BucketDeployment reads its source asset from the CDK bootstrap bucket.",
                **bucket_read,
            },
        )

    def _grant_node_permissions(self, eks_cluster_arn: str) -> None:
        """Inline, least-privilege additions the reference execution role carries (aws-hyperpod.md 8, item 7)."""
        role = self.execution_role
        self.lifecycle_bucket.grant_read(role)
        role.add_to_policy(
            iam.PolicyStatement(
                sid="HyperPodNodeNetworking",
                actions=[
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DetachNetworkInterface",
                    "ec2:ModifyNetworkInterfaceAttribute",
                ],
                resources=["*"],  # ENI actions do not support resource-level scoping at creation
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="TagNodeInterfaces",
                actions=["ec2:CreateTags"],
                resources=[Stack.of(self).format_arn(service="ec2", resource="network-interface", resource_name="*")],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PullImages",
                actions=[
                    "ecr:GetAuthorizationToken",
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                ],
                resources=["*"],  # GetAuthorizationToken is account-wide; images come from AWS-owned registries
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="PodIdentity", actions=["eks-auth:AssumeRoleForPodIdentity"], resources=[eks_cluster_arn]
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(sid="HealthAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"])
        )
