"""`kvtier-<env>-<lob>`: one line of business, isolated in its own namespace and stack."""

from __future__ import annotations

from aws_cdk import Tags
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtier.config.loader import Config
from kvtier.config.lob import LineOfBusiness
from kvtier.stacks.base import KvtierStack

LOB_TAG = "kvtier:line-of-business"


class LobStack(KvtierStack):
    def __init__(self, scope: Construct, config: Config, lob: LineOfBusiness, cluster: eks.ICluster) -> None:
        super().__init__(scope, config.env, lob.name, f"kvtier {config.env.name}: line of business {lob.name}")
        Tags.of(self).add(LOB_TAG, lob.name)
        self.lob = lob
        self.cluster = cluster
