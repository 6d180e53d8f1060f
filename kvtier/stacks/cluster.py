"""`kvtier-<env>-cluster`: EKS, add-ons, the HyperPod dependencies and the HyperPod cluster, in design order."""

from __future__ import annotations

from aws_cdk import CfnOutput
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.constructs.addons import ClusterAddons, addons
from kvtier.constructs.eks import KvtierEks
from kvtier.constructs.hyperpod import HyperPodCluster
from kvtier.constructs.hyperpod_dependencies import (
    CHART_PATH,
    COMMIT,
    NAMESPACE,
    RELEASE,
    REPOSITORY,
    HyperPodDependencies,
)
from kvtier.constructs.network import KvtierNetwork
from kvtier.stacks.base import KvtierStack
from kvtier.stacks.manifests import HelmRelease


class ClusterStack(KvtierStack):
    def __init__(self, scope: Construct, env: Environment, network: KvtierNetwork) -> None:
        super().__init__(scope, env, "cluster", f"kvtier {env.name}: EKS and the HyperPod cluster")
        subnets = network.node_subnets
        # 1. EKS, OIDC provider and access entries.
        self.eks = KvtierEks(
            self,
            "Eks",
            env=env,
            vpc=network.vpc,
            subnets=subnets,
            node_security_group=network.node_security_group,
        )
        # 2. The four networking add-ons, before any node.
        self.network_addons = ClusterAddons(
            self, "NetworkAddons", eks_cluster=self.eks, specs=addons("network"), outputs=self.outputs
        )
        # 3. HyperPod dependencies, installed without waiting for pods (no node exists yet).
        self.hyperpod_dependencies = HyperPodDependencies(
            self,
            "HyperPodDependencies",
            cluster=self.eks.icluster,
            region=env.region,
            vpc=network.vpc,
            subnets=subnets,
            security_group=network.node_security_group,
            kubectl_layer=self.eks.kubectl_layer,
        )
        # 4. The HyperPod cluster.
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            env=env,
            eks_cluster_arn=self.eks.cluster.cluster_arn,
            subnets=subnets,
            security_group=network.node_security_group,
        )
        self.outputs.releases.append(
            HelmRelease(
                "helm (custom resource)",
                RELEASE,
                f"{REPOSITORY}@{COMMIT}:{CHART_PATH}",
                COMMIT[:8],
                NAMESPACE,
                source="reference aws-hyperpod.md 7",
            )
        )
        for dependency in (
            *self.network_addons.addons.values(),
            self.hyperpod_dependencies.resource,
            *self.eks.admin_entries,
        ):
            self.hyperpod.cluster.node.add_dependency(dependency)
        # 5. Add-ons whose pods need nodes.
        self.node_addons = ClusterAddons(
            self,
            "NodeAddons",
            eks_cluster=self.eks,
            specs=addons("nodes"),
            outputs=self.outputs,
            context={
                "hyperpod_cluster_arn": self.hyperpod.cluster_arn,
                "eks_cluster_arn": self.eks.cluster.cluster_arn,
            },
        )
        self.node_addons.node.add_dependency(self.hyperpod.cluster)
        self._outputs(env)

    def _outputs(self, env: Environment) -> None:
        CfnOutput(self, "EksClusterName", value=self.eks.cluster.cluster_name)
        CfnOutput(self, "EksClusterArn", value=self.eks.cluster.cluster_arn)
        CfnOutput(self, "HyperPodClusterName", value=env.hyperpod_cluster_name)
        CfnOutput(self, "HyperPodClusterArn", value=self.hyperpod.cluster_arn)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {env.region} --name {env.eks_cluster_name}",
        )
