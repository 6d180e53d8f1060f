"""Tiered Storage on an existing HyperPod cluster: a custom resource that sets it through the SageMaker API.

A cluster kvtier creates gets `TieredStorageConfig` from CloudFormation (kvtier.constructs.hyperpod); a cluster it
imports is not CloudFormation's to change, so the handler in kvtier/lambdas/tiered_storage calls UpdateCluster and
waits, through the Provider framework's is-complete polling: the call itself is made by a poll that finds the cluster
InService, so an update (or a rollback's) never hits a busy cluster.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from kvtier.constructs.waiter import handler_function, waiting_resource
from kvtier.lambdas.tiered_storage.index import STATE_PARAMETER_ENV

HANDLER_DIR = Path(__file__).resolve().parent.parent / "lambdas" / "tiered_storage"
RESOURCE_TYPE = "Custom::HyperPodTieredStorage"
# The Provider framework's waiter allows at most one hour in all (aws-cdk-lib custom-resources ProviderProps
# totalTimeout); the poll interval must divide it.
TOTAL_TIMEOUT = Duration.hours(1)
QUERY_INTERVAL = Duration.seconds(30)


class TieredStorageSetting(Construct):
    """Sets HyperPod Tiered Storage on the cluster `cluster_arn`; restores the owner's setting on delete."""

    def __init__(
        self, scope: Construct, id: str, *, cluster_arn: str, eks_cluster_arn: str, memory_percent: int
    ) -> None:
        super().__init__(scope, id)
        code = lambda_.Code.from_asset(str(HANDLER_DIR), exclude=["__pycache__", "*.pyc"])
        self.on_event = handler_function(
            self, "OnEvent", handler="index.on_event", code=code, description="Records the Tiered Storage change"
        )
        self.is_complete = handler_function(
            self,
            "IsComplete",
            handler="index.is_complete",
            code=code,
            description="Changes Tiered Storage once the HyperPod cluster is InService",
        )
        # Least privilege: only this cluster. on_event only reads; is_complete calls UpdateCluster once the cluster is
        # InService (a rollback's Update must not call it on a busy cluster). No iam:PassRole: the request carries no
        # role. eks:DescribeCluster on the orchestrator, the one read the resource schema's update handler lists that
        # applies to a Tiered Storage-only update (docs/references.md "Issue 26").
        self.on_event.add_to_role_policy(
            iam.PolicyStatement(sid="ReadThisCluster", actions=["sagemaker:DescribeCluster"], resources=[cluster_arn])
        )
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(
                sid="TieredStorageOnThisCluster",
                actions=["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"],
                resources=[cluster_arn],
            )
        )
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(sid="ReadTheOrchestrator", actions=["eks:DescribeCluster"], resources=[eks_cluster_arn])
        )
        # The poll state: which request is_complete's own UpdateCluster was sent for, and when. The framework hands
        # every poll the same event and refuses Data from a poll that is not complete, so it lives here (issue 37).
        self.poll_state = ssm.StringParameter(
            self,
            "PollState",
            string_value="{}",
            description="kvtier Tiered Storage waiter: the request its UpdateCluster was last sent for",
        )
        self.is_complete.add_environment(STATE_PARAMETER_ENV, self.poll_state.parameter_name)
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(
                sid="PollState",
                actions=["ssm:GetParameter", "ssm:PutParameter"],
                resources=[self.poll_state.parameter_arn],
            )
        )
        # Always Enable: with tiered storage off in config, kvtier leaves the owner's setting alone (no resource).
        self.resource = waiting_resource(
            self,
            "Setting",
            on_event=self.on_event,
            is_complete=self.is_complete,
            query_interval=QUERY_INTERVAL,
            total_timeout=TOTAL_TIMEOUT,
            resource_type=RESOURCE_TYPE,
            properties={
                "ClusterName": cluster_arn,  # the API takes the ARN as ClusterName
                "Mode": "Enable",
                "InstanceMemoryAllocationPercentage": memory_percent,
            },
        )
