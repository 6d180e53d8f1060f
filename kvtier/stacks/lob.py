"""`kvtier-<env>-<lob>`: one line of business, isolated in its own namespace and stack.

One method per concern, each applying its own chart (one file in dist/) after the namespace: isolation (quota,
limits, network policies, the model-reader service account), the L2 volume and its janitor, the Kyverno policy,
then the endpoints (which need all three; operator endpoints rewired by the policy also wait until Kyverno reports
it Ready), then their benchmark Jobs. A LOB with S3 model weights also gets its
Pod Identity role (the stack's only IAM resource): standalone engines read through it; in operator mode the
operator mounts weights with the cluster's S3 CSI driver instead (docs/lines-of-business.md). Nothing here
refers to another LOB.
"""

from __future__ import annotations

from aws_cdk import Duration, Tags
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from kvtier.config.endpoint import Endpoint
from kvtier.config.loader import Config
from kvtier.config.lob import LineOfBusiness
from kvtier.connectors import l2_subdir
from kvtier.constructs.keda_access import KedaAccess, needs_keda_role
from kvtier.constructs.manifests import apply_chart
from kvtier.constructs.model_access import ModelReaderRole, s3_models
from kvtier.constructs.observability import AmpRules
from kvtier.k8s.base import KvtierChart, api_object, chart_app
from kvtier.k8s.bench_job import add_bench_job
from kvtier.k8s.curvine.healer import add_healer_access
from kvtier.k8s.curvine.janitor import add_janitor
from kvtier.k8s.curvine.volumes import pvc_spec, static_pv
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.k8s.isolation import add_isolation
from kvtier.k8s.kyverno_policy import add_l2_policy
from kvtier.k8s.lob_admission import add_lob_guard
from kvtier.k8s.namespace import add_namespace
from kvtier.k8s.observability.charts import add_lob_observability, lob_files
from kvtier.k8s.observability.rules import lob_groups
from kvtier.k8s.operator_endpoint import add_operator_endpoint
from kvtier.k8s.router import add_router
from kvtier.k8s.standalone import add_standalone_engine
from kvtier.naming import l2_lob_path, lob_namespace
from kvtier.planner.pool_routing import endpoint_knobs
from kvtier.planner.shapes import endpoint_model
from kvtier.serving import L2_CLAIM
from kvtier.sizing import engine_disk
from kvtier.stacks.base import KvtierStack

LOB_TAG = "kvtier:line-of-business"
# Kyverno v1.19.0 sets one condition on a Policy, `Ready`, and only after it has built the policy's webhook
# (pkg/controllers/webhook/controller.go updatePolicyStatuses). The CDK's KubernetesObjectValue returns the first
# non-empty output of `kubectl get -o jsonpath`, so the path must be empty until then: it selects the type of a
# condition whose status is "True", never the status itself ("False" would be returned at once).
POLICY_READY_JSONPATH = '.status.conditions[?(@.status=="True")].type'
POLICY_READY_TIMEOUT = Duration.minutes(10)


def rewired(endpoint: Endpoint) -> bool:
    """An operator endpoint whose pods the LOB's Kyverno Policy rewires to Curvine."""
    return endpoint.mode == "operator" and endpoint.cache.l2 == "curvine"


def l2_volume_name(env: str, lob: str) -> str:
    """The LOB's cluster-scoped static PersistentVolume (12 + 20 + 10 characters)."""
    return f"kvtier-{env}-{lob}-l2"


class LobStack(KvtierStack):
    def __init__(
        self,
        scope: Construct,
        config: Config,
        lob: LineOfBusiness,
        cluster: eks.ICluster,
        oidc_provider_arn: str | None = None,
    ) -> None:
        super().__init__(scope, config.env, lob.name, f"kvtier {config.env.name}: line of business {lob.name}")
        Tags.of(self).add(LOB_TAG, lob.name)
        self.lob = lob
        self.kvtier_config = config  # the whole config: the pool-aware knobs come from the plan
        self.cluster = cluster
        self.namespace = lob_namespace(lob.name)
        self._app = chart_app()
        self.operator_pods = any(e.mode == "operator" for e in lob.endpoints)
        self.keda = (
            KedaAccess(self, "KedaAccess", env=config.env, lob=lob, oidc_provider_arn=oidc_provider_arn)
            if oidc_provider_arn is not None and needs_keda_role(config.env, lob)
            else None
        )
        self.guard = self._guard()
        self.namespace_manifest = self._namespace()
        self.isolation = self._isolation()
        self.model_access = (
            ModelReaderRole(self, "ModelAccess", lob=lob, cluster_name=config.env.eks_cluster_name)
            if s3_models(lob)
            else None
        )
        self.l2 = self._l2()
        self.admission = self._admission()
        self.policy_ready = self._policy_ready() if any(rewired(e) for e in lob.endpoints) else None
        self.endpoints = {endpoint.name: self._endpoint(endpoint) for endpoint in lob.endpoints}
        self.benchmarks = {e.name: self._benchmark(e) for e in lob.endpoints if e.bench.enabled}
        self.observability = self._observability()

    def _chart(self, id: str) -> KvtierChart:
        return KvtierChart(self._app, id, namespace=self.namespace)

    def _apply(self, id: str, chart: KvtierChart, *after: eks.KubernetesManifest) -> eks.KubernetesManifest:
        manifest = apply_chart(self, id, self.cluster, chart, self.outputs)
        for dependency in after:
            manifest.node.add_dependency(dependency)
        return manifest

    def _namespace(self) -> eks.KubernetesManifest:
        chart = self._chart("namespace")
        add_namespace(chart, self.lob.name, operator_pods=self.operator_pods)
        return self._apply("Namespace", chart, *([self.guard] if self.guard is not None else []))

    def _guard(self) -> eks.KubernetesManifest | None:
        """The LOB's cluster-scoped Kyverno guard (kvtier/k8s/lob_admission.py), applied before the namespace: it
        pins the namespace's Pod Security labels, so a change of them must reach the guard first."""
        chart = self._chart("guard")
        config = self.kvtier_config
        inference_operator = any(e.mode == "operator" for lob in config.lobs for e in lob.endpoints)
        # KEDA rules wherever kvtier installs KEDA; a LOB without a KEDA role may name none (nothing equals this).
        keda_role = self.keda.role.role_arn if self.keda is not None else f"(LOB {self.lob.name} has no KEDA role)"
        keda_role_arn = keda_role if self.config_env.keda.source == "inference-operator" else None
        options = {
            "operator_pods": self.operator_pods,
            "inference_operator": inference_operator,
            "keda_role_arn": keda_role_arn,
        }
        if not add_lob_guard(chart, self.config_env.name, self.lob, **options):
            return None
        return self._apply("Guard", chart)

    def _isolation(self) -> eks.KubernetesManifest:
        """Quota, default limits, network policies and the model-reader service account (kvtier/k8s/isolation.py)."""
        chart = self._chart("isolation")
        add_isolation(chart, self.config_env, self.lob)
        return self._apply("Isolation", chart, self.namespace_manifest)

    def _l2(self) -> eks.KubernetesManifest:
        """The LOB's directory of the Curvine pool as the PVC `l2-cache`, the janitor that keeps it in budget, and the
        healer's right to restart the LOB's pods whose L2 mount died."""
        env = self.config_env
        chart = self._chart("l2")
        volume = l2_volume_name(env.name, self.lob.name)
        static_pv(
            chart,
            "volume",
            env=env,
            name=volume,
            curvine_path=l2_lob_path(env.name, self.lob.name),
            claim_namespace=self.namespace,
            claim_name=L2_CLAIM,
        )
        api_object(
            chart,
            "claim",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": L2_CLAIM, "namespace": self.namespace},
                "spec": pvc_spec(volume),
            },
        )
        add_janitor(
            chart,
            "janitor",
            env=env,
            lob=self.lob.name,
            namespace=self.namespace,
            claim_name=L2_CLAIM,
            budget_gb=self.lob.l2.budget_gb,
            max_age_hours=self.lob.l2.max_age_hours,
            in_use=[l2_subdir(e) for e in self.lob.endpoints if e.cache.l2 == "curvine"],
        )
        if env.hyperpod.installs("curvine"):
            add_healer_access(chart, "healer", self.namespace)  # the healer runs with kvtier's Curvine charts
        return self._apply("L2", chart, self.namespace_manifest)

    def _admission(self) -> eks.KubernetesManifest:
        """The Kyverno Policy that rewires operator pods to the L2 volume (and fails their admission closed)."""
        chart = self._chart("admission")
        add_l2_policy(chart, self.lob.name)
        return self._apply("Admission", chart, self.namespace_manifest)

    def _policy_ready(self) -> eks.KubernetesObjectValue:
        """Waits (up to POLICY_READY_TIMEOUT, else the deploy fails) until Kyverno reports the Policy Ready: a pod
        created before its webhook exists is neither rewired nor refused and keeps the operator's shared L2."""
        ready = eks.KubernetesObjectValue(
            self,
            "AdmissionReady",
            cluster=self.cluster,
            object_type="policies.kyverno.io",
            object_name=POLICY_NAME,
            object_namespace=self.namespace,
            json_path=POLICY_READY_JSONPATH,
            timeout=POLICY_READY_TIMEOUT,
        )
        ready.node.add_dependency(self.admission)
        return ready

    def _endpoint(self, endpoint: Endpoint) -> eks.KubernetesManifest:
        """One endpoint's objects: an InferenceEndpointConfig, or vLLM + router in standalone mode."""
        chart = self._chart(f"endpoint-{endpoint.name}")
        # What the pods write to their node's disk, from the model as the LOB file describes it (issue 38).
        disk = engine_disk(endpoint, endpoint_model(self.lob, endpoint, f"lobs/{self.lob.name}.yaml"))
        if endpoint.mode == "operator":
            add_operator_endpoint(chart, self.config_env, self.lob.name, endpoint, disk)
        else:
            keda_role_arn = self.keda.role.role_arn if self.keda is not None else None
            add_standalone_engine(
                chart, self.config_env, self.lob.name, endpoint, keda_role_arn=keda_role_arn, disk=disk
            )
            knobs = endpoint_knobs(self.kvtier_config, self.lob.name, endpoint)
            add_router(chart, self.config_env, self.lob.name, endpoint, knobs)
        # The policy must be active before the first pod, pods need their L2 claim, and pods reading S3 weights
        # need their Pod Identity association (credentials are given at pod start).
        manifest = self._apply(
            f"Endpoint-{endpoint.name}", chart, self.namespace_manifest, self.isolation, self.l2, self.admission
        )
        if self.model_access is not None:
            manifest.node.add_dependency(self.model_access)
        if self.keda is not None:
            manifest.node.add_dependency(self.keda)
        if rewired(endpoint) and self.policy_ready is not None:
            manifest.node.add_dependency(self.policy_ready)
        return manifest

    def _benchmark(self, endpoint: Endpoint) -> eks.KubernetesManifest:
        """The endpoint's benchmark Job (`bench.enabled`), created after the endpoint; it waits for it to serve."""
        chart = self._chart(f"bench-{endpoint.name}")
        add_bench_job(chart, self.config_env, self.lob.name, endpoint)
        return self._apply(f"Bench-{endpoint.name}", chart, self.endpoints[endpoint.name])

    def _observability(self) -> eks.KubernetesManifest | AmpRules | None:
        """The LOB's PodMonitors and rules (`observability` section); its rule file goes to dist/ in every mode."""
        env = self.config_env
        self.outputs.files.update(lob_files(env, self.lob))
        if env.observability.mode == "prometheus-operator":
            chart = self._chart("observability")
            add_lob_observability(chart, env, self.lob)
            return self._apply("Observability", chart, self.namespace_manifest)
        if env.observability.mode == "hyperpod-addon":
            groups = lob_groups(env, self.lob)
            return AmpRules(self, "AmpRules", env=env, name=f"kvtier-{env.name}-{self.lob.name}", groups=groups)
        return None
