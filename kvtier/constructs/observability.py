"""kvtier's rules in the Amazon Managed Service for Prometheus workspace the HyperPod observability add-on writes to.

`AWS::APS::RuleGroupsNamespace` takes a Prometheus rule file as `Data` (AWS CloudFormation resource reference); the
add-on itself, its workspace and its Pod Identity role belong to the cluster's owner (docs/observability.md).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_aps as aps
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.k8s.observability.charts import rule_file


class AmpRules(Construct):
    def __init__(self, scope: Construct, id: str, *, env: Environment, name: str, groups: list[dict[str, Any]]) -> None:
        super().__init__(scope, id)
        addon = env.observability.hyperpod_addon
        assert addon is not None  # mode hyperpod-addon requires it (kvtier.config.observability)
        self.namespace = aps.CfnRuleGroupsNamespace(
            self, "Namespace", name=name, workspace=addon.amp_workspace_arn, data=rule_file(groups)
        )
