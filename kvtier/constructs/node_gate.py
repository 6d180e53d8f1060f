"""The platform stack's first resource: a custom resource that waits, on the stack's first create only, until the EKS
cluster has a Ready node of kvtier's system role (issue 37; handler kvtier/lambdas/eks_api/node_gate.py).

HyperPod's continuous provisioning completes the cluster stack before any node has joined; every other resource of
the platform stack depends on this one, so one `cdk deploy --all` waits here instead of failing a Helm wait. It lives
in the platform stack so that a timeout rolls back that stack alone, never EKS or HyperPod.

Its pieces, all its own: the two handlers, the waiter, a security group (`KvtierNetwork.api_client_group`), an EKS
access entry whose Kubernetes group may only get and list nodes (kvtier/k8s/node_gate.py), and that RBAC chart.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.constructs.lambda_code import package_code
from kvtier.constructs.manifests import StackOutputs, apply_chart
from kvtier.constructs.network import KvtierNetwork
from kvtier.constructs.waiter import handler_function, waiting_resource
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.node_gate import NODE_GATE_GROUP, add_node_gate_access
from kvtier.k8s.placement import node_selector

RESOURCE_TYPE = "Custom::KvtierSystemNodeGate"
QUERY_INTERVAL = Duration.seconds(30)
# Under CloudFormation's one hour for a custom resource; the handler fails at 45 minutes with its own message.
TOTAL_TIMEOUT = Duration.minutes(50)


def system_selector(env: Environment) -> str:
    """The Kubernetes label selector of the environment's system nodes (`kvtier.io/role=system`)."""
    return ",".join(f"{key}={value}" for key, value in node_selector(env, "system").items())


class SystemNodeGate(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        env: Environment,
        cluster: eks.ICluster,
        network: KvtierNetwork,
        outputs: StackOutputs,
    ) -> None:
        super().__init__(scope, id)
        code = package_code("eks_api")
        self.security_group = network.api_client_group(
            self,
            "SecurityGroup",
            control_plane_group_id=cluster.cluster_security_group_id,
            description="the system-node gate",
        )
        self.on_event = handler_function(
            self,
            "OnEvent",
            handler="eks_api.node_gate.on_event",
            code=code,
            description="Asks the system-node gate to wait (on the platform stack's first create)",
        )
        self.is_complete = handler_function(
            self,
            "IsComplete",
            handler="eks_api.node_gate.is_complete",
            code=code,
            description="Waits until the EKS cluster has a Ready system node",
            vpc=network.vpc,  # the API endpoint may be private
            subnets=network.node_subnets,
            security_group=self.security_group,
        )
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(sid="ReadTheCluster", actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        # No access policy: EKS's view policies cover no nodes, and the admin-view one reads Secrets too.
        self.access_entry = eks.CfnAccessEntry(
            self,
            "Access",
            cluster_name=cluster.cluster_name,
            principal_arn=self.is_complete.role.role_arn,  # type: ignore[union-attr]
            type="STANDARD",
            kubernetes_groups=[NODE_GATE_GROUP],
        )
        chart = KvtierChart(chart_app(), "node-gate")
        add_node_gate_access(chart)
        self.node_reader = apply_chart(self, "NodeReader", cluster, chart, outputs)
        self.resource = waiting_resource(
            self,
            "Gate",
            on_event=self.on_event,
            is_complete=self.is_complete,
            query_interval=QUERY_INTERVAL,
            total_timeout=TOTAL_TIMEOUT,
            resource_type=RESOURCE_TYPE,
            properties={
                "ClusterName": cluster.cluster_name,
                "Region": env.region,
                "LabelSelector": system_selector(env),
                "Environment": env.name,
            },
        )
        self.resource.node.add_dependency(self.access_entry, self.node_reader)
