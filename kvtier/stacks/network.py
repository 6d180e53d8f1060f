"""`kvtier-<env>-network`: the VPC, subnets, NAT, endpoints, security groups and flow logs."""

from __future__ import annotations

from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.constructs.network import KvtierNetwork
from kvtier.stacks.base import KvtierStack


class NetworkStack(KvtierStack):
    def __init__(self, scope: Construct, env: Environment) -> None:
        super().__init__(scope, env, "network", f"kvtier {env.name}: VPC and networking for HyperPod")
        self.network = KvtierNetwork(
            self, "Network", config=env.network, zones=list(env.availability_zones), zone_ids=env.zones_are_ids
        )
