"""Composition of one environment: which stacks, in which order, with which dependencies."""

from __future__ import annotations

from dataclasses import dataclass, field

from constructs import Construct

from kvtier.config.loader import Config
from kvtier.stacks.base import KvtierStack
from kvtier.stacks.cluster import ClusterStack
from kvtier.stacks.network import NetworkStack


@dataclass
class EnvironmentStacks:
    network: NetworkStack
    cluster: ClusterStack
    extra: list[KvtierStack] = field(default_factory=list)

    @property
    def all(self) -> list[KvtierStack]:
        return [self.network, self.cluster, *self.extra]


def build_environment(scope: Construct, config: Config) -> EnvironmentStacks:
    env = config.env
    network = NetworkStack(scope, env)
    cluster = ClusterStack(scope, env, network.network)
    cluster.add_stack_dependency(network)
    return EnvironmentStacks(network=network, cluster=cluster)
