"""`kvtier-<env>-platform`: shared in-cluster services (Curvine, the Inference Operator add-on, Kyverno)."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtier.config.loader import Config
from kvtier.constructs.inference_operator import InferenceOperator
from kvtier.constructs.kyverno import Kyverno
from kvtier.constructs.manifests import apply_chart
from kvtier.constructs.network import KvtierNetwork
from kvtier.constructs.node_gate import SystemNodeGate
from kvtier.constructs.observability import AmpRules
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.curvine.charts import curvine_charts
from kvtier.k8s.observability.charts import add_platform_observability, platform_files
from kvtier.k8s.observability.rules import platform_groups
from kvtier.stacks.base import KvtierStack


class PlatformStack(KvtierStack):
    def __init__(
        self,
        scope: Construct,
        config: Config,
        cluster: eks.ICluster,
        *,
        oidc_provider_arn: str,
        hyperpod_cluster_arn: str,
        network: KvtierNetwork | None = None,
    ) -> None:
        """`network`: the VPC of a cluster kvtier creates (None for an existing cluster, whose nodes are there)."""
        super().__init__(scope, config.env, "platform", f"kvtier {config.env.name}: shared in-cluster services")
        self.cluster = cluster
        self.node_gate = self._node_gate(network) if network is not None else None
        self.curvine = self._curvine() if self.config_env.hyperpod.installs("curvine") else []
        self.operator = self._operator(oidc_provider_arn, hyperpod_cluster_arn)
        self.kyverno = self._kyverno()
        self.observability = self._observability()
        if self.node_gate is not None:  # everything else waits for a Ready system node
            for child in self.node.children:
                if child is not self.node_gate:
                    child.node.add_dependency(self.node_gate.resource)

    def _node_gate(self, network: KvtierNetwork) -> SystemNodeGate:
        """The first resource (issue 37): on the first create it waits, under an hour, until a system node is Ready.
        Continuous provisioning completes the cluster stack before any node joins; a timeout here rolls back this
        stack only."""
        return SystemNodeGate(
            self, "SystemNodeGate", env=self.config_env, cluster=self.cluster, network=network, outputs=self.outputs
        )

    def _curvine(self) -> list[eks.KubernetesManifest]:
        """Curvine's charts, each applied after the previous one (namespace, cluster, CSI driver). On an existing
        cluster with `install.curvine: false` the owner runs Curvine under the same names (LOB volumes point at
        kvtier.k8s.curvine.master_addresses)."""
        applied: list[eks.KubernetesManifest] = []
        for chart in curvine_charts(chart_app(), self.config_env):
            manifest = apply_chart(self, f"Curvine-{chart.chart_id}", self.cluster, chart, self.outputs)
            if applied:
                manifest.node.add_dependency(applied[-1])
            applied.append(manifest)
        return applied

    def _operator(self, oidc_provider_arn: str, hyperpod_cluster_arn: str) -> InferenceOperator | None:
        """The Inference Operator add-on with its IAM roles and TLS bucket (skipped where the owner installs it)."""
        if not self.config_env.hyperpod.installs("inference_operator"):
            return None
        return InferenceOperator(
            self,
            "InferenceOperator",
            env=self.config_env,
            cluster=self.cluster,
            oidc_provider_arn=oidc_provider_arn,
            hyperpod_cluster_arn=hyperpod_cluster_arn,
            outputs=self.outputs,
        )

    def _kyverno(self) -> Kyverno | None:
        """Kyverno (Helm), which runs the LOB policies that rewire operator pods to Curvine."""
        if not self.config_env.hyperpod.installs("kyverno"):
            return None
        return Kyverno(self, "Kyverno", env=self.config_env, cluster=self.cluster, outputs=self.outputs)

    def _observability(self) -> eks.KubernetesManifest | AmpRules | None:
        """Scrape objects, rules and dashboards (the `observability` section); rule files and dashboards go to dist/
        in every mode."""
        env = self.config_env
        self.outputs.files.update(platform_files(env))
        if env.observability.mode == "prometheus-operator":
            chart = KvtierChart(chart_app(), "observability")
            add_platform_observability(chart, env)
            manifest = apply_chart(self, "Observability", self.cluster, chart, self.outputs)
            for dependency in self.curvine:  # the curvine namespace holds Curvine's monitors and the rules
                manifest.node.add_dependency(dependency)
            return manifest
        if env.observability.mode == "hyperpod-addon":
            return AmpRules(self, "AmpRules", env=env, name=f"kvtier-{env.name}", groups=platform_groups(env))
        return None
