"""`kvtier-<env>-platform`: shared in-cluster services (Curvine, the Inference Operator add-on, Kyverno)."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtier.config.loader import Config
from kvtier.stacks.base import KvtierStack


class PlatformStack(KvtierStack):
    def __init__(self, scope: Construct, config: Config, cluster: eks.ICluster) -> None:
        super().__init__(scope, config.env, "platform", f"kvtier {config.env.name}: shared in-cluster services")
        self.cluster = cluster
