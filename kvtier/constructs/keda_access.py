"""A LOB's KEDA role: what the LOB's AWS autoscaling triggers may read, signed as the LOB and not as KEDA.

KEDA v2.17.1's `aws` pod identity with `roleArn` (kedacore/keda@a3e20902 pkg/scaling/resolver/scale_resolvers.go
L198-L213, pkg/scalers/aws/aws_config_cache.go L148-L171): the KEDA operator assumes the role itself, first with
AssumeRoleWithWebIdentity from its own service account token when `AWS_WEB_IDENTITY_TOKEN_FILE` is set (IRSA, how
kvtier configures the Inference Operator add-on's KEDA: kvtier/constructs/inference_operator.py), else with
AssumeRole from whatever credentials it has (EKS Pod Identity included). So the role trusts KEDA's service account
through the cluster's OIDC provider; EKS Pod Identity cannot serve here (one association per service account, and
the service account is KEDA's, shared by every LOB). `identityOwner: workload` would read a role from an IRSA
annotation the LOB admin writes; kvtier's ClusterPolicy refuses it (kvtier/k8s/lob_admission.py), and pins the
role a namespace's TriggerAuthentications may name to this one.

What it reads: the AMP workspaces the LOB's triggers query, and CloudWatch metric reads, which have no resource-level
permissions (so any LOB's KEDA role reads every CloudWatch metric of the account: docs/security.md row 11).
"""

from __future__ import annotations

from aws_cdk import Fn, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from kvtier.config.endpoint import CloudWatchTrigger, PrometheusTrigger
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.constructs.inference_operator import KEDA_SA, NAMESPACE
from kvtier.constructs.irsa import irsa_principal
from kvtier.constructs.nag import acknowledge
from kvtier.k8s.autoscaling import amp_query_url, needs_aws, signal_server
from kvtier.k8s.lob_admission import keda_role_name


def _workspaces(env: Environment, lob: LineOfBusiness) -> list[str]:
    """The AMP workspace ids the LOB's standalone triggers query."""
    found: set[str] = set()
    for e in lob.endpoints:
        if e.mode != "standalone" or e.autoscaling is None:
            continue
        for t in e.autoscaling.all_triggers:
            if isinstance(t, PrometheusTrigger):
                found.add(t.server_address.rstrip("/").rsplit("/", 1)[1])
            elif not isinstance(t, CloudWatchTrigger) and signal_server(env, e) == amp_query_url(env):
                server = amp_query_url(env)
                assert server is not None
                found.add(server.rsplit("/", 1)[1])
    return sorted(found)


def needs_keda_role(env: Environment, lob: LineOfBusiness) -> bool:
    """A standalone endpoint reads AWS for its autoscaling, through the KEDA kvtier installs."""
    standalone = [e for e in lob.endpoints if e.mode == "standalone"]
    return env.keda.source == "inference-operator" and any(needs_aws(env, e) for e in standalone)


class KedaAccess(Construct):
    """The role `kvtier-<env>-<lob>-keda`, assumed by KEDA for this LOB's TriggerAuthentications only."""

    def __init__(
        self, scope: Construct, id: str, *, env: Environment, lob: LineOfBusiness, oidc_provider_arn: str
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        issuer = Fn.select(1, Fn.split(":oidc-provider/", oidc_provider_arn))
        self.role = iam.Role(
            self,
            "Role",
            role_name=keda_role_name(env.name, lob.name),
            assumed_by=irsa_principal(
                self,
                "Trust",
                provider_arn=oidc_provider_arn,
                issuer=issuer,
                namespace=NAMESPACE,
                service_account=KEDA_SA,
            ),
            description=f"kvtier LOB {lob.name}: the metrics its autoscaling triggers read, through KEDA",
        )
        workspaces = _workspaces(env, lob)
        if workspaces:
            self.role.add_to_policy(
                iam.PolicyStatement(
                    sid="QueryOwnWorkspaces",
                    actions=["aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"],
                    resources=[
                        f"arn:{stack.partition}:aps:{env.region}:{stack.account}:workspace/{w}" for w in workspaces
                    ],
                )
            )
        cloudwatch = any(
            isinstance(t, CloudWatchTrigger)
            for e in lob.endpoints
            if e.mode == "standalone" and e.autoscaling is not None
            for t in e.autoscaling.all_triggers
        )
        if cloudwatch:
            self.role.add_to_policy(
                iam.PolicyStatement(
                    sid="ReadCloudWatchMetrics",
                    actions=["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics", "cloudwatch:ListMetrics"],
                    resources=["*"],  # no resource-level permissions for metric reads
                )
            )
            acknowledge(self.role, "AwsSolutions-IAM5[Resource::*]", "CloudWatch metric reads have no resources.")
