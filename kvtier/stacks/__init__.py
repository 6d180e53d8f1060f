"""Composition of one environment: which stacks, in which order, with which dependencies.

Stack modules are imported inside `build_environment`, so constructs can use `kvtier.constructs.manifests` without
importing every stack (no import cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from constructs import Construct

from kvtier.config.loader import Config

if TYPE_CHECKING:
    from kvtier.stacks.base import KvtierStack
    from kvtier.stacks.cluster import ClusterStack
    from kvtier.stacks.lob import LobStack
    from kvtier.stacks.network import NetworkStack
    from kvtier.stacks.platform import PlatformStack


@dataclass
class EnvironmentStacks:
    network: NetworkStack | None  # None for an existing cluster (design "Stacks")
    cluster: ClusterStack
    platform: PlatformStack
    lobs: list[LobStack] = field(default_factory=list)

    @property
    def all(self) -> list[KvtierStack]:
        network = [self.network] if self.network is not None else []
        return [*network, self.cluster, self.platform, *self.lobs]


def build_environment(scope: Construct, config: Config) -> EnvironmentStacks:
    """Platform depends on cluster, cluster on network; each LOB only on cluster and platform (design).
    An existing cluster has no network stack, and its cluster stack imports it (kvtier.stacks.cluster)."""
    from kvtier.constructs.model_access import model_keys
    from kvtier.stacks.cluster import cluster_stack
    from kvtier.stacks.lob import LobStack
    from kvtier.stacks.network import NetworkStack
    from kvtier.stacks.platform import PlatformStack

    env = config.env
    network = NetworkStack(scope, env) if env.hyperpod.existing is None else None
    cluster = cluster_stack(
        scope,
        env,
        network.network if network is not None else None,
        config.model_buckets() if config.env.model_bucket_access == "named" else (),
        model_keys(config.lobs, env.region),
    )
    if network is not None:
        cluster.add_stack_dependency(network)
    platform = PlatformStack(
        scope,
        config,
        cluster.icluster,
        oidc_provider_arn=cluster.oidc_provider_arn,
        hyperpod_cluster_arn=cluster.hyperpod_cluster_arn,
        network=network.network if network is not None else None,
    )
    platform.add_stack_dependency(cluster)
    stacks = EnvironmentStacks(network=network, cluster=cluster, platform=platform)
    for lob in config.lobs:
        lob_stack = LobStack(scope, config, lob, cluster.icluster, oidc_provider_arn=cluster.oidc_provider_arn)
        lob_stack.add_stack_dependency(cluster)
        lob_stack.add_stack_dependency(platform)
        stacks.lobs.append(lob_stack)
    return stacks
