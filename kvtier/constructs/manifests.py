"""Applying cdk8s charts from a stack, and recording what dist/ must list (charts, Helm releases, add-ons)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtier.addons import AddonSpec
from kvtier.k8s.base import KvtierChart


@dataclass(frozen=True)
class HelmRelease:
    """A Helm release or EKS add-on a stack installs: listed in dist/<env>/<stack>/README.md."""

    kind: str  # "helm", "eks-addon" or "helm (custom resource)"
    name: str
    chart: str
    version: str
    namespace: str
    values: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def addon_release(spec: AddonSpec, values: dict[str, Any] | None = None) -> HelmRelease:
    """The dist/ entry of an EKS add-on (values: its configuration, as a reader should see it)."""
    return HelmRelease(
        "eks-addon", spec.name, spec.name, spec.version, spec.namespace, dict(values or spec.configuration), spec.source
    )


@dataclass
class StackOutputs:
    """What a stack contributes to dist/: its charts (as YAML files), its releases (in a README), and plain files
    (relative path -> text: rule files and dashboards)."""

    charts: list[KvtierChart] = field(default_factory=list)
    releases: list[HelmRelease] = field(default_factory=list)
    # Other generated files (e.g. Grafana dashboards) by path under the stack's dist/ folder.
    files: dict[str, str] = field(default_factory=dict)
    # Each chart's objects as applied, by chart id: rendered once (cdk8s's to_json is the slow part of a synth).
    rendered: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def objects(self, chart: KvtierChart) -> list[dict[str, Any]]:
        """`chart`'s objects as applied (rendered now if it was recorded without being applied)."""
        if chart.chart_id not in self.rendered:
            self.rendered[chart.chart_id] = chart.manifests()
        return self.rendered[chart.chart_id]


def apply_chart(
    scope: Construct, id: str, cluster: eks.ICluster, chart: KvtierChart, outputs: StackOutputs
) -> eks.KubernetesManifest:
    """Apply `chart` to the cluster from `scope`'s stack and record it for dist/."""
    outputs.charts.append(chart)
    return eks.KubernetesManifest(
        scope, id, cluster=cluster, manifest=outputs.objects(chart), overwrite=True, prune=True
    )
