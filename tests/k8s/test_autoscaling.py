"""Autoscaling in both modes: the standalone ScaledObject (and its AWS TriggerAuthentication) against KEDA's own CRDs
at the pinned version (tests/crds/keda), the operator's autoScalingSpec against the Inference Operator CRD; kvtier's
signals become queries of its recording rules, with the HPA metric type that makes `target` per replica."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.config.endpoint import Autoscaling, CloudWatchTrigger, Endpoint, PrometheusTrigger, SignalTrigger
from kvtier.config.environment import Environment
from kvtier.config.keda import KedaConfig
from kvtier.config.loader import Config
from kvtier.config.observability import HyperPodAddonConfig, ObservabilityConfig
from kvtier.k8s.autoscaling import operator_autoscaling_spec, scaled_object, signal_query
from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.observability.rules import SIGNAL_RECORDS, platform_groups
from kvtier.k8s.operator_endpoint import inference_endpoint_config
from kvtier.k8s.standalone import add_standalone_engine
from kvtier.rules import load_checked
from kvtier.versions import KEDA_VERSION
from tests.support import CONFIG_DIR, ROOT, shared_path
from tests.validation import crd_errors, validate_k8s

KEDA_CRDS = ROOT / "tests" / "crds" / "keda"
SCALED_OBJECTS = KEDA_CRDS / "keda.sh_scaledobjects.yaml"
TRIGGER_AUTHS = KEDA_CRDS / "keda.sh_triggerauthentications.yaml"
IEC_CRD = "reference/crds/inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml"
IN_CLUSTER = "http://kube-prometheus-stack-prometheus.monitoring:9090"
AMP_ARN = "arn:aws:aps:us-east-1:111122223333:workspace/ws-0123abcd-4567"
AMP_URL = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567"
SIGNALS = tuple(SignalTrigger(signal=s, target=2.0) for s in SIGNAL_RECORDS)
CLOUDWATCH = CloudWatchTrigger(
    type="cloudwatch",
    namespace="AWS/SageMaker",
    metric_name="Invocations",
    dimensions={"EndpointName": "support", "VariantName": "all"},
    target_value=10,
)
RAW_AMP = PrometheusTrigger(
    type="prometheus", server_address=AMP_URL, query="sum(vllm:num_requests_waiting)", target_value=5
)


@pytest.fixture(scope="module")
def prod() -> Config:
    return load_checked(CONFIG_DIR, "prod")


def _in_cluster(env: Environment) -> Environment:
    return env.model_copy(update={"keda": KedaConfig(prometheus_url=IN_CLUSTER)})


def _on_amp(env: Environment) -> Environment:
    amp = ObservabilityConfig(mode="hyperpod-addon", hyperpod_addon=HyperPodAddonConfig(amp_workspace_arn=AMP_ARN))
    return env.model_copy(update={"observability": amp})


def _scaled(endpoint: Endpoint, *triggers: Any, low: int = 1, high: int = 4) -> Endpoint:
    return endpoint.model_copy(
        update={"replicas": low, "autoscaling": Autoscaling(min_replicas=low, max_replicas=high, triggers=triggers)}
    )


def _chart(env: Environment, endpoint: Endpoint) -> list[dict[str, Any]]:
    chart = KvtierChart(chart_app(), f"endpoint-{endpoint.name}", namespace="kvtier-support")
    add_standalone_engine(chart, env, "support", endpoint)
    return chart.manifests()


def _keda_errors(obj: dict[str, Any]) -> list[str]:
    crd = SCALED_OBJECTS if obj["kind"] == "ScaledObject" else TRIGGER_AUTHS
    return crd_errors(crd, "v1alpha1", obj)


def test_the_keda_crds_are_the_pinned_release() -> None:
    readme = (KEDA_CRDS / "README.md").read_text(encoding="utf-8")
    assert f"kedacore/keda@{KEDA_VERSION}" in readme
    for path in (SCALED_OBJECTS, TRIGGER_AUTHS):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert crd["spec"]["group"] == "keda.sh" and [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
        assert path.name in readme


def test_standalone_signals_scale_the_deployment_through_the_in_cluster_prometheus(prod: Config) -> None:
    env = _in_cluster(prod.env)
    endpoint = _scaled(prod.lob("support").endpoints[0], *SIGNALS, low=2, high=2)
    objects = _chart(env, endpoint)
    kinds = sorted(o["kind"] for o in objects)
    assert "ScaledObject" in kinds and "TriggerAuthentication" not in kinds  # no AWS call: no AWS identity
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    scaled = next(o for o in objects if o["kind"] == "ScaledObject")
    assert _keda_errors(scaled) == []
    assert "replicas" not in deployment["spec"]  # the HPA owns the count; a field would reset it on every apply
    validate_k8s(deployment)
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama31-8b"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 2)
    by_name = {t["name"]: t for t in spec["triggers"]}
    queue = by_name["llama31-8b-queue-per-replica"]
    assert queue["type"] == "prometheus" and queue["metricType"] == "AverageValue"
    assert queue["metadata"] == {
        "serverAddress": IN_CLUSTER,
        "query": 'max(lob_endpoint:kvtier_requests_waiting:sum{lob="support", kvtier_endpoint="llama31-8b"})',
        "threshold": "2",
        "activationThreshold": "0",
    }
    assert by_name["llama31-8b-ttft-p90-over-slo-1"]["metricType"] == "Value"


def test_thresholds_are_written_in_full(prod: Config) -> None:
    """KEDA parses the string: a large or fractional target is never rounded to six digits."""
    big = SignalTrigger(signal="computed_tokens_per_replica", target=1234567.0)
    fine = SignalTrigger(signal="ttft_p90_over_slo", target=0.8125, activation_target=0.05)
    endpoint = _scaled(prod.lob("support").endpoints[0], big, fine)
    first, second = scaled_object(_in_cluster(prod.env), "support", endpoint)["spec"]["triggers"]
    assert first["metadata"]["threshold"] == "1234567"
    assert (second["metadata"]["threshold"], second["metadata"]["activationThreshold"]) == ("0.8125", "0.05")


def test_standalone_aws_triggers_sign_with_kedas_own_identity(prod: Config) -> None:
    env = _on_amp(prod.env)
    endpoint = _scaled(prod.lob("support").endpoints[0], SIGNALS[0], CLOUDWATCH, RAW_AMP)
    objects = _chart(env, endpoint)
    auth = next(o for o in objects if o["kind"] == "TriggerAuthentication")
    scaled = next(o for o in objects if o["kind"] == "ScaledObject")
    assert _keda_errors(auth) == [] and _keda_errors(scaled) == []
    assert auth["spec"] == {"podIdentity": {"provider": "aws"}}
    signal, cloudwatch, raw = scaled["spec"]["triggers"]
    for trigger in (signal, cloudwatch, raw):
        assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}
        assert trigger["metadata"]["awsRegion"] == "us-east-1"
    assert signal["metadata"]["serverAddress"] == AMP_URL
    assert cloudwatch["type"] == "aws-cloudwatch"
    assert (cloudwatch["metadata"]["dimensionName"], cloudwatch["metadata"]["dimensionValue"]) == (
        "EndpointName;VariantName",
        "support;all",
    )


def test_a_misspelled_scaled_object_field_fails_the_crd(prod: Config) -> None:
    """The check can fail: KEDA's schema, closed, refuses a field it does not define."""
    scaled = scaled_object(_in_cluster(prod.env), "support", _scaled(prod.lob("support").endpoints[0], SIGNALS[0]))
    scaled["spec"]["maxReplicas"] = scaled["spec"].pop("maxReplicaCount")
    assert any("maxReplicas" in e for e in _keda_errors(scaled))


def test_no_autoscaling_keeps_the_fixed_replicas(prod: Config) -> None:
    objects = _chart(prod.env, prod.lob("support").endpoints[0])
    assert all(o["kind"] not in ("ScaledObject", "TriggerAuthentication") for o in objects)
    assert next(o for o in objects if o["kind"] == "Deployment")["spec"]["replicas"] == 2


def test_operator_signals_render_the_crds_prometheus_trigger_list(prod: Config) -> None:
    crd: Path = shared_path(IEC_CRD)
    env = _on_amp(prod.env)
    endpoint = _scaled(prod.lob("retail").endpoints[0], *SIGNALS, CLOUDWATCH, high=2)
    iec = inference_endpoint_config(env, "retail", endpoint)
    assert crd_errors(crd, "v1", iec) == []
    spec = iec["spec"]["autoScalingSpec"]
    assert "prometheusTrigger" not in spec and "cloudWatchTrigger" not in spec
    prometheus = {t["name"]: t for t in spec["prometheusTriggerList"]}
    assert set(prometheus) == {
        "qwen3-8b-queue-per-replica",
        "qwen3-8b-ttft-p90-over-slo-1",
        "qwen3-8b-computed-tokens-per-replica-2",
        "qwen3-8b-l2-hit-tokens-per-replica-3",
    }
    queue = prometheus["qwen3-8b-queue-per-replica"]
    assert queue["serverAddress"] == AMP_URL and queue["metricType"] == "Average"
    assert queue["query"] == signal_query("retail", "qwen3-8b", "queue_per_replica")
    assert prometheus["qwen3-8b-ttft-p90-over-slo-1"]["metricType"] == "Value"
    assert [t["name"] for t in spec["cloudWatchTriggerList"]] == ["qwen3-8b-cloudwatch-4"]


def test_one_raw_operator_trigger_renders_as_before(prod: Config) -> None:
    """Backwards compatible: a single CloudWatch or AMP trigger keeps the singular keys."""
    endpoint = prod.lob("retail").endpoints[0]
    one = endpoint.model_copy(update={"autoscaling": Autoscaling(min_replicas=1, max_replicas=2, trigger=RAW_AMP)})
    spec = operator_autoscaling_spec(prod.env, "retail", one)
    assert spec["prometheusTrigger"] == {
        "name": "qwen3-8b-prometheus",
        "serverAddress": AMP_URL,
        "query": "sum(vllm:num_requests_waiting)",
        "targetValue": 5.0,
        "activationTargetValue": 0.0,
    }


def test_every_signal_query_reads_a_recorded_series(prod: Config) -> None:
    """A signal's query names a record kvtier's rules write (platform groups), per endpoint."""
    recorded = {r["record"] for g in platform_groups(prod.env) for r in g["rules"] if "record" in r}
    for signal, record in SIGNAL_RECORDS.items():
        assert record in recorded, signal
        assert signal_query("retail", "qwen3-8b", signal).startswith(f"max({record}{{")


def test_cooldown_is_the_scale_down_window_in_both_modes(prod: Config) -> None:
    """KEDA's cooldownPeriod only governs scaling to zero (min_replicas >= 1 here), so the endpoint's cooldown must
    reach the HPA's scale-down stabilization window, the window `kvtier simulate --autoscale` models."""
    base = prod.lob("retail").endpoints[0]
    policy = Autoscaling(min_replicas=1, max_replicas=2, cooldown_period_s=123, trigger=RAW_AMP)
    spec = operator_autoscaling_spec(prod.env, "retail", base.model_copy(update={"autoscaling": policy}))
    assert spec["scaleDownStabilizationTime"] == 123
    support = prod.lob("support").endpoints[0]
    standalone = support.model_copy(
        update={
            "replicas": 1,
            "autoscaling": Autoscaling(max_replicas=2, cooldown_period_s=123, triggers=(SIGNALS[0],)),
        }
    )
    behavior = scaled_object(_in_cluster(prod.env), "support", standalone)["spec"]["advanced"]
    assert behavior["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 123
