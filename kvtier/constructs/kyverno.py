"""Kyverno from its official Helm chart (pinned), controllers on system nodes.

Kyverno runs the per-LOB policies that rewire operator pods to the Curvine L2 (kvtier/k8s/kyverno_policy.py). Those
policies fail closed for their namespace only, through per-policy webhooks; the chart's global webhook settings
stay at their defaults. Values keys: kyverno/kyverno@v1.19.0 charts/kyverno/values.yaml (docs/references.md "Kyverno chart").
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtier.config.environment import Environment
from kvtier.constructs.manifests import HelmRelease, StackOutputs
from kvtier.k8s.placement import placement
from kvtier.versions import KYVERNO_APP_VERSION, KYVERNO_CHART_REPOSITORY, KYVERNO_CHART_VERSION

NAMESPACE = "kyverno"  # design "Names and limits"
RELEASE = "kyverno"
CONTROLLERS = ("admissionController", "backgroundController", "cleanupController", "reportsController")
HOOKS = ("webhooksCleanup", "test")  # chart hook pods; `crds.migration` is nested under `crds`
MAX_ADMISSION_REPLICAS = 3  # Kyverno's high-availability count; pod admission in kvtier-* depends on it


def admission_replicas(env: Environment) -> int:
    """One admission controller per system node, up to three (its pods spread over nodes by default)."""
    nodes = sum(g.count for g in env.groups("system"))
    return max(1, min(MAX_ADMISSION_REPLICAS, nodes))


def kyverno_values(env: Environment) -> dict[str, Any]:
    system = placement(env, "system")
    # The chart always merges global.nodeSelector (default kubernetes.io/os: linux) unless a component sets its own.
    scheduling: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/os": "linux", **system.node_selector},
        "tolerations": [dict(t) for t in system.tolerations],
    }
    values: dict[str, Any] = {"global": dict(scheduling)}
    for component in (*CONTROLLERS, *HOOKS):
        values[component] = dict(scheduling)
    values["admissionController"]["replicas"] = admission_replicas(env)
    values["crds"] = {"migration": dict(scheduling)}
    # Never let the chart turn every policy's failurePolicy into Ignore: kvtier-* pods must fail closed.
    values["features"] = {"forceFailurePolicyIgnore": {"enabled": False}}
    return values


class Kyverno(Construct):
    def __init__(
        self, scope: Construct, id: str, *, env: Environment, cluster: eks.ICluster, outputs: StackOutputs
    ) -> None:
        super().__init__(scope, id)
        values = kyverno_values(env)
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            chart="kyverno",
            repository=KYVERNO_CHART_REPOSITORY,
            version=KYVERNO_CHART_VERSION,
            release=RELEASE,
            namespace=NAMESPACE,
            create_namespace=True,
            values=values,
            # LOB stacks create Policies right after: wait until the CRDs and the webhook serve.
            wait=True,
            timeout=Duration.minutes(10),
        )
        outputs.releases.append(
            HelmRelease(
                "helm",
                RELEASE,
                f"kyverno ({KYVERNO_CHART_REPOSITORY})",
                KYVERNO_CHART_VERSION,
                NAMESPACE,
                values,
                source=f"kyverno/kyverno@{KYVERNO_APP_VERSION}:charts/kyverno/Chart.yaml",
            )
        )
