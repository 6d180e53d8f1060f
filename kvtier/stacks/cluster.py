"""`kvtier-<env>-cluster`: EKS, add-ons, the HyperPod dependencies and the HyperPod cluster, in design order; or, for a
cluster kvtier did not create, the import, the switched-on add-ons and the Tiered Storage custom resource.

Both kinds give the platform and LOB stacks the same interface (`ClusterStack`): the `ICluster` to apply manifests
to, IRSA trust through `eks`, the OIDC provider ARN and the HyperPod cluster ARN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import CfnOutput, aws_eks_v2
from constructs import Construct

from kvtier.addons import addons
from kvtier.config.environment import Environment
from kvtier.config.hyperpod import ADDON_GROUPS, ExistingCluster
from kvtier.constructs.eks import KvtierEks
from kvtier.constructs.eks_access import EksAccess, ExistingEks
from kvtier.constructs.eks_addons import AddonContext, ClusterAddons
from kvtier.constructs.hyperpod import HyperPodCluster
from kvtier.constructs.hyperpod_dependencies import (
    CHART_PATH,
    COMMIT,
    NAMESPACE,
    RELEASE,
    REPOSITORY,
    HyperPodDependencies,
)
from kvtier.constructs.manifests import HelmRelease
from kvtier.constructs.model_access import ModelKey
from kvtier.constructs.network import KvtierNetwork
from kvtier.stacks.base import KvtierStack, established

if TYPE_CHECKING:  # imported where used: only an existing cluster needs it (and aws-cdk-lib's Step Functions)
    from kvtier.constructs.tiered_storage import TieredStorageSetting


class ClusterStack(KvtierStack):
    """What the platform and LOB stacks use, whichever kind of cluster."""

    eks: EksAccess

    def __init__(self, scope: Construct, env: Environment, description: str) -> None:
        super().__init__(scope, env, "cluster", description)

    @property
    def icluster(self) -> aws_eks_v2.ICluster:
        return self.eks.icluster

    @property
    def oidc_provider_arn(self) -> str:
        raise NotImplementedError

    @property
    def hyperpod_cluster_arn(self) -> str:
        raise NotImplementedError

    def _dependencies_release(self) -> None:
        self.outputs.releases.append(
            HelmRelease(
                "helm (custom resource)",
                RELEASE,
                f"{REPOSITORY}@{COMMIT}:{CHART_PATH}",
                COMMIT[:8],
                NAMESPACE,
                source=f"{REPOSITORY}@{COMMIT[:8]}:{CHART_PATH}/README.md (install before the cluster)",
            )
        )


def cluster_stack(
    scope: Construct,
    env: Environment,
    network: KvtierNetwork | None,
    model_buckets: tuple[str, ...] = (),
    model_keys: tuple[ModelKey, ...] = (),
) -> ClusterStack:
    """kvtier's own cluster in `network`, or the import of the existing one (no network stack then).
    `model_buckets`: the S3 buckets the LOB files load weights from (with `model_bucket_access: named` the S3 CSI driver
    may read only those; with `tagged` it names none, so LOBs never change this stack). `model_keys`: the SSE-KMS keys
    the LOB files name for them (issue 37), which the driver may use through S3 in either mode."""
    if env.hyperpod.existing is not None:
        return ExistingClusterStack(scope, env, env.hyperpod.existing, model_buckets, model_keys)
    if network is None:
        raise ValueError("a cluster kvtier creates needs the network stack")
    return NewClusterStack(scope, env, network, model_buckets, model_keys)


class NewClusterStack(ClusterStack):
    def __init__(
        self,
        scope: Construct,
        env: Environment,
        network: KvtierNetwork,
        model_buckets: tuple[str, ...],
        model_keys: tuple[ModelKey, ...] = (),
    ) -> None:
        super().__init__(scope, env, f"kvtier {env.name}: EKS and the HyperPod cluster")
        subnets = network.node_subnets
        # 1. EKS, OIDC provider and access entries.
        self.kvtier_eks = KvtierEks(
            self,
            "Eks",
            env=env,
            vpc=network.vpc,
            subnets=subnets,
            node_security_group=network.node_security_group,
        )
        self.eks = self.kvtier_eks
        # CDK's kubectl handler runs in the EKS-created cluster security group: with an `eks` or `ecr.api` interface
        # endpoint (private DNS) it must reach the endpoints too, or every manifest times out.
        network.admit_to_endpoints(
            self,
            "EndpointsFromKubectlHandler",
            self.kvtier_eks.cluster.cluster_security_group_id,
            "HTTPS from the EKS cluster security group (CDK's kubectl handler)",
        )
        # 2. The four networking add-ons, before any node.
        self.network_addons = ClusterAddons(
            self, "NetworkAddons", eks_cluster=self.eks, specs=addons("network"), outputs=self.outputs
        )
        # 3. HyperPod dependencies, installed without waiting for pods (no node exists yet). The installer downloads
        # from the internet and is cluster admin: its own security group, never the node group's (issue 37).
        self.installer_security_group = network.api_client_group(
            self,
            "InstallerSecurityGroup",
            control_plane_group_id=self.kvtier_eks.cluster.cluster_security_group_id,
            description="the HyperPod dependencies installer",
        )
        self.hyperpod_dependencies = HyperPodDependencies(
            self,
            "HyperPodDependencies",
            cluster=self.eks.icluster,
            region=env.region,
            vpc=network.vpc,
            subnets=subnets,
            security_group=self.installer_security_group,
            kubectl_layer=self.eks.kubectl_layer,
        )
        self.hyperpod_dependencies.resource.node.add_dependency(*self.network_addons.addons.values())
        # 4. The HyperPod cluster.
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            env=env,
            eks_cluster_arn=self.kvtier_eks.cluster.cluster_arn,
            subnets=subnets,
            security_group=network.node_security_group,
            established=established(self, env.name),
        )
        self._dependencies_release()
        for dependency in (
            *self.network_addons.addons.values(),
            self.hyperpod_dependencies.resource,
            *self.kvtier_eks.admin_entries,
        ):
            self.hyperpod.cluster.node.add_dependency(dependency)
        # 5. Add-ons whose pods need nodes.
        self.node_addons = ClusterAddons(
            self,
            "NodeAddons",
            eks_cluster=self.eks,
            specs=addons("nodes"),
            outputs=self.outputs,
            context=AddonContext(
                hyperpod_cluster_arn=self.hyperpod.cluster_arn,
                eks_cluster_arn=self.kvtier_eks.cluster.cluster_arn,
                model_buckets=model_buckets,
                env_name=env.name,
                bucket_access=env.model_bucket_access,
                model_keys=model_keys,
            ),
        )
        self.node_addons.node.add_dependency(self.hyperpod.cluster)
        self._outputs(env)

    @property
    def oidc_provider_arn(self) -> str:
        return self.kvtier_eks.oidc_provider.open_id_connect_provider_arn

    @property
    def hyperpod_cluster_arn(self) -> str:
        return self.hyperpod.cluster_arn

    def _outputs(self, env: Environment) -> None:
        CfnOutput(self, "EksClusterName", value=self.kvtier_eks.cluster.cluster_name)
        CfnOutput(self, "EksClusterArn", value=self.kvtier_eks.cluster.cluster_arn)
        CfnOutput(self, "HyperPodClusterName", value=env.hyperpod_cluster_name)
        CfnOutput(self, "HyperPodClusterArn", value=self.hyperpod.cluster_arn)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {env.region} --name {env.eks_cluster_name}",
        )


class ExistingClusterStack(ClusterStack):
    """An existing HyperPod cluster: imported, with only what its install switches ask for, and Tiered Storage set
    through the API. No VPC, EKS or HyperPod resource is created."""

    def __init__(
        self,
        scope: Construct,
        env: Environment,
        existing: ExistingCluster,
        model_buckets: tuple[str, ...],
        model_keys: tuple[ModelKey, ...] = (),
    ) -> None:
        super().__init__(
            scope,
            env,
            f"kvtier {env.name}: the existing cluster {existing.eks_cluster_name} (imported), Tiered Storage",
        )
        self.existing = existing
        self.existing_eks = ExistingEks(self, "Eks", env=env, existing=existing)
        self.eks = self.existing_eks
        # Add-ons the owner asked kvtier to install; the cluster already has nodes, so no ordering is needed.
        context = AddonContext(
            hyperpod_cluster_arn=existing.hyperpod_cluster_arn,
            eks_cluster_arn=self.eks.icluster.cluster_arn,
            model_buckets=model_buckets,
            env_name=env.name,
            bucket_access=env.model_bucket_access,
            model_keys=model_keys,
        )
        self.addons: dict[str, ClusterAddons] = {}
        for phase in ADDON_GROUPS:
            specs = [s for s in addons(phase) if env.hyperpod.installs_addon(s.name, s.phase)]
            if specs:
                self.addons[phase] = ClusterAddons(
                    self,
                    {"network": "NetworkAddons", "nodes": "NodeAddons"}[phase],
                    eks_cluster=self.eks,
                    specs=specs,
                    outputs=self.outputs,
                    context=context,
                    resolve_conflicts="PRESERVE",
                )
        self.hyperpod_dependencies: HyperPodDependencies | None = None
        if env.hyperpod.installs("hyperpod_dependencies"):
            self.hyperpod_dependencies = HyperPodDependencies(
                self,
                "HyperPodDependencies",
                cluster=self.eks.icluster,
                region=env.region,
                vpc=self.existing_eks.vpc,
                subnets=self.existing_eks.subnets,
                security_group=self.existing_eks.security_group,
                kubectl_layer=self.eks.kubectl_layer,
            )
            self._dependencies_release()
        # With tiered storage off in config, kvtier leaves the owner's setting alone.
        self.tiered_storage: TieredStorageSetting | None = None
        if env.hyperpod.tiered_storage.enabled:
            from kvtier.constructs.tiered_storage import TieredStorageSetting

            self.tiered_storage = TieredStorageSetting(
                self,
                "TieredStorage",
                cluster_arn=existing.hyperpod_cluster_arn,
                eks_cluster_arn=self.eks.icluster.cluster_arn,
                memory_percent=env.hyperpod.tiered_storage.memory_percent,
            )
        self._outputs(env)

    @property
    def oidc_provider_arn(self) -> str:
        return self.existing.oidc_provider_arn

    @property
    def hyperpod_cluster_arn(self) -> str:
        return self.existing.hyperpod_cluster_arn

    def _outputs(self, env: Environment) -> None:
        CfnOutput(self, "EksClusterName", value=self.existing.eks_cluster_name)
        CfnOutput(self, "HyperPodClusterName", value=env.hyperpod_cluster_name)
        CfnOutput(self, "HyperPodClusterArn", value=self.existing.hyperpod_cluster_arn)
        if self.tiered_storage is not None:
            CfnOutput(self, "TieredStorageSetting", value=self.tiered_storage.resource.ref)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=f"aws eks update-kubeconfig --region {env.region} --name {self.existing.eks_cluster_name}",
        )
