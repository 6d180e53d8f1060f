"""Composition of one environment: which stacks, in which order, with which dependencies.

Stack modules are imported inside `build_environment`, so constructs can use `kvtier.stacks.manifests` without
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
    network: NetworkStack
    cluster: ClusterStack
    platform: PlatformStack
    lobs: list[LobStack] = field(default_factory=list)

    @property
    def all(self) -> list[KvtierStack]:
        return [self.network, self.cluster, self.platform, *self.lobs]


def build_environment(scope: Construct, config: Config) -> EnvironmentStacks:
    """Platform depends on cluster, cluster on network; each LOB only on cluster and platform (design)."""
    from kvtier.stacks.cluster import ClusterStack
    from kvtier.stacks.lob import LobStack
    from kvtier.stacks.network import NetworkStack
    from kvtier.stacks.platform import PlatformStack

    env = config.env
    network = NetworkStack(scope, env)
    cluster = ClusterStack(scope, env, network.network)
    cluster.add_stack_dependency(network)
    platform = PlatformStack(scope, config, cluster.eks.icluster)
    platform.add_stack_dependency(cluster)
    stacks = EnvironmentStacks(network=network, cluster=cluster, platform=platform)
    for lob in config.lobs:
        lob_stack = LobStack(scope, config, lob, cluster.eks.icluster)
        lob_stack.add_stack_dependency(cluster)
        lob_stack.add_stack_dependency(platform)
        stacks.lobs.append(lob_stack)
    return stacks
