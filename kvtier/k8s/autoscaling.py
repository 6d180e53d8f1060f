"""Autoscaling in both modes from one `autoscaling` section (docs/endpoints.md "Autoscaling").

Operator mode: the InferenceEndpointConfig's `autoScalingSpec`, which the operator turns into a KEDA ScaledObject of
its own; its Prometheus triggers query Amazon Managed Prometheus only (the CRD's `serverAddress` pattern). Standalone
mode: a KEDA `ScaledObject` (keda.sh/v1alpha1, KEDA_VERSION) on the endpoint's Deployment, querying the in-cluster
Prometheus (`keda.prometheus_url`) or the AMP workspace; AWS queries (AMP, CloudWatch) sign as the LOB's own KEDA
role through a TriggerAuthentication `podIdentity: {provider: aws, roleArn}` (issue 33; KEDA v2.17.1
pkg/scalers/aws/aws_common.go: without roleArn it would be the operator's own credentials, every LOB's reads).

kvtier's signals are recording rules (kvtier/k8s/observability/rules.py SIGNAL_RECORDS), one series per endpoint.
The per-replica ones are totals with the `AverageValue` metric type: the HPA divides by the replica count, so
`target` is per replica. `ttft_p90_over_slo` is a `Value`: the HPA scales by value / target.
"""

from __future__ import annotations

from typing import Any

from kvtier.config import keda
from kvtier.config.endpoint import (
    Autoscaling,
    CloudWatchTrigger,
    Endpoint,
    PrometheusTrigger,
    Signal,
    SignalTrigger,
)
from kvtier.config.environment import Environment
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.breaks import admission_broken
from kvtier.k8s.endpoint_names import engine_labels
from kvtier.k8s.observability import metrics as m
from kvtier.k8s.observability.rules import SIGNAL_RECORDS
from kvtier.naming import lob_namespace

KEDA_API = "keda.sh/v1alpha1"
SIGNAL_METRIC_TYPES: dict[Signal, str] = {
    "queue_per_replica": "AverageValue",
    "ttft_p90_over_slo": "Value",
    "computed_tokens_per_replica": "AverageValue",
    "l2_hit_tokens_per_replica": "AverageValue",
}
OPERATOR_METRIC_TYPES = {"AverageValue": "Average", "Value": "Value"}  # the CRD's enum for the same HPA types


def signal_query(lob: str, endpoint: str, signal: Signal) -> str:
    """One value per endpoint: `max` also folds the copies an HA Prometheus pair may keep."""
    return f'max({SIGNAL_RECORDS[signal]}{{{m.LOB}="{lob}", {m.ENDPOINT}="{endpoint}"}})'


def amp_query_url(env: Environment) -> str | None:
    return keda.amp_query_url(env.observability)


def signal_server(env: Environment, endpoint: Endpoint) -> str | None:
    return keda.signal_server(env.observability, env.keda, endpoint.mode)


def _number(value: float) -> str:
    """KEDA's metadata values are strings: whole numbers without a fraction, others in full (never rounded)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _trigger_name(endpoint: str, index: int, trigger: SignalTrigger | PrometheusTrigger | CloudWatchTrigger) -> str:
    kind = trigger.signal.replace("_", "-") if isinstance(trigger, SignalTrigger) else trigger.type
    return f"{endpoint}-{kind}" if index == 0 else f"{endpoint}-{kind}-{index}"


# Operator mode ------------------------------------------------------------------------------------------------------


def _operator_prometheus(env: Environment, lob: str, endpoint: Endpoint, name: str, t: Any) -> dict[str, Any]:
    if isinstance(t, SignalTrigger):
        return {
            "name": name,
            "serverAddress": signal_server(env, endpoint) or "",
            "query": signal_query(lob, endpoint.name, t.signal),
            "targetValue": t.target,
            "activationTargetValue": t.activation_target,
            "metricType": OPERATOR_METRIC_TYPES[SIGNAL_METRIC_TYPES[t.signal]],
        }
    return {
        "name": name,
        "serverAddress": t.server_address,
        "query": t.query,
        "targetValue": t.target_value,
        "activationTargetValue": t.activation_target_value,
    }


def _operator_cloudwatch(name: str, t: CloudWatchTrigger) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": t.namespace,
        "metricName": t.metric_name,
        "metricStat": t.statistic,
        "dimensions": [{"name": k, "value": v} for k, v in sorted(t.dimensions.items())],
        "targetValue": t.target_value,
        "activationTargetValue": t.activation_target_value,
    }


def operator_autoscaling_spec(env: Environment, lob: str, endpoint: Endpoint) -> dict[str, Any]:
    """The CRD's autoScalingSpec. One raw trigger keeps the singular keys (what kvtier rendered before signals);
    otherwise the trigger lists, which the CRD prefers over the singular keys."""
    autoscaling = endpoint.autoscaling
    assert autoscaling is not None
    spec: dict[str, Any] = {
        "minReplicaCount": autoscaling.min_replicas,
        "maxReplicaCount": autoscaling.max_replicas,
        "pollingInterval": autoscaling.polling_interval_s,
        "cooldownPeriod": autoscaling.cooldown_period_s,
        # cooldownPeriod only governs scaling to zero; from 1 to N the HPA's scale-down window does (what
        # `kvtier simulate --autoscale` models): docs/references.md, "Issue 27 (part C)".
        "scaleDownStabilizationTime": autoscaling.cooldown_period_s,
    }
    triggers = autoscaling.all_triggers
    prometheus: list[dict[str, Any]] = []
    cloudwatch: list[dict[str, Any]] = []
    for index, t in enumerate(triggers):
        name = _trigger_name(endpoint.name, index, t)
        if isinstance(t, CloudWatchTrigger):
            cloudwatch.append(_operator_cloudwatch(name, t))
        else:
            prometheus.append(_operator_prometheus(env, lob, endpoint, name, t))
    if len(triggers) == 1 and not isinstance(triggers[0], SignalTrigger):
        if prometheus:
            spec["prometheusTrigger"] = prometheus[0]
        else:
            spec["cloudWatchTrigger"] = cloudwatch[0]
        return spec
    if prometheus:
        spec["prometheusTriggerList"] = prometheus
    if cloudwatch:
        spec["cloudWatchTriggerList"] = cloudwatch
    return spec


# Standalone mode ----------------------------------------------------------------------------------------------------


def aws_auth_name(endpoint: str) -> str:
    return f"{endpoint}-keda-aws"


def _needs_aws(env: Environment, endpoint: Endpoint, autoscaling: Autoscaling) -> bool:
    """Whether a trigger reads AWS: CloudWatch, an AMP query, or a signal read from AMP."""
    on_amp = signal_server(env, endpoint) is not None and signal_server(env, endpoint) == amp_query_url(env)
    return any(not isinstance(t, SignalTrigger) or on_amp for t in autoscaling.all_triggers)


def _keda_trigger(env: Environment, lob: str, endpoint: Endpoint, index: int, t: Any, auth: bool) -> dict[str, Any]:
    name = _trigger_name(endpoint.name, index, t)
    if isinstance(t, CloudWatchTrigger):
        dims = sorted(t.dimensions.items())
        metadata = {
            "namespace": t.namespace,
            "metricName": t.metric_name,
            "metricStat": t.statistic,
            "targetMetricValue": _number(t.target_value),
            "activationTargetMetricValue": _number(t.activation_target_value),
            "minMetricValue": "0",  # required by the scaler; what an empty CloudWatch answer counts as
            "awsRegion": env.region,
        }
        if dims:
            metadata["dimensionName"] = ";".join(k for k, _ in dims)
            metadata["dimensionValue"] = ";".join(v for _, v in dims)
        trigger: dict[str, Any] = {"type": "aws-cloudwatch", "name": name, "metadata": metadata}
    elif isinstance(t, SignalTrigger):
        server = signal_server(env, endpoint) or ""
        metadata = {
            "serverAddress": server,
            "query": signal_query(lob, endpoint.name, t.signal),
            "threshold": _number(t.target),
            "activationThreshold": _number(t.activation_target),
        }
        if server == amp_query_url(env):
            metadata["awsRegion"] = env.region
        trigger = {"type": "prometheus", "name": name, "metricType": SIGNAL_METRIC_TYPES[t.signal]}
        trigger["metadata"] = metadata
    else:
        metadata = {
            "serverAddress": t.server_address,
            "query": t.query,
            "threshold": _number(t.target_value),
            "activationThreshold": _number(t.activation_target_value),
            "awsRegion": t.server_address.split(".")[1],  # https://aps-workspaces.<region>.amazonaws.com/...
        }
        trigger = {"type": "prometheus", "name": name, "metadata": metadata}
    if auth and "awsRegion" in trigger["metadata"]:
        trigger["authenticationRef"] = {"name": aws_auth_name(endpoint.name)}
    return trigger


def scaled_object(env: Environment, lob: str, endpoint: Endpoint) -> dict[str, Any]:
    autoscaling = endpoint.autoscaling
    assert autoscaling is not None
    auth = _needs_aws(env, endpoint, autoscaling)
    return {
        "apiVersion": KEDA_API,
        "kind": "ScaledObject",
        "metadata": {"name": endpoint.name, "namespace": lob_namespace(lob), "labels": engine_labels(endpoint.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": endpoint.name},
            "minReplicaCount": autoscaling.min_replicas,
            "maxReplicaCount": autoscaling.max_replicas,
            "pollingInterval": autoscaling.polling_interval_s,
            "cooldownPeriod": autoscaling.cooldown_period_s,
            # The same window in both modes: the HPA's scale-down stabilization (cooldownPeriod is scale-to-zero only).
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": autoscaling.cooldown_period_s}}
                }
            },
            "triggers": [_keda_trigger(env, lob, endpoint, i, t, auth) for i, t in enumerate(autoscaling.all_triggers)],
        },
    }


def aws_trigger_authentication(lob: str, endpoint: str, role_arn: str | None = None) -> dict[str, Any]:
    """AWS calls signed as the LOB's KEDA role (`roleArn`: KEDA v2.17.1 assumes it with its own credentials,
    pkg/scaling/resolver/scale_resolvers.go, pkg/scalers/aws/aws_config_cache.go; kvtier/constructs/keda_access.py).
    Without a role (a KEDA kvtier did not install), the KEDA operator's own credentials."""
    identity: dict[str, Any] = {"provider": "aws"}
    if role_arn is not None and not admission_broken("keda"):
        identity["roleArn"] = role_arn
    return {
        "apiVersion": KEDA_API,
        "kind": "TriggerAuthentication",
        "metadata": {"name": aws_auth_name(endpoint), "namespace": lob_namespace(lob)},
        "spec": {"podIdentity": identity},
    }


def needs_aws(env: Environment, endpoint: Endpoint) -> bool:
    """Whether the endpoint's standalone autoscaling reads AWS (and so needs the LOB's KEDA role)."""
    return endpoint.autoscaling is not None and _needs_aws(env, endpoint, endpoint.autoscaling)


def add_standalone_autoscaling(
    chart: KvtierChart, env: Environment, lob: str, endpoint: Endpoint, *, keda_role_arn: str | None = None
) -> None:
    """The endpoint's ScaledObject (and its AWS TriggerAuthentication when a trigger reads AWS); nothing without
    `autoscaling`."""
    if endpoint.autoscaling is None:
        return
    if _needs_aws(env, endpoint, endpoint.autoscaling):
        api_object(chart, "keda-aws-auth", aws_trigger_authentication(lob, endpoint.name, keda_role_arn))
    api_object(chart, "scaled-object", scaled_object(env, lob, endpoint))
