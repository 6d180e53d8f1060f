"""`observability` section of the environment file: who scrapes kvtier's pods, and the thresholds of its alerts.

Modes (docs/observability.md):
- `prometheus-operator`: kvtier applies PodMonitors, ServiceMonitors and PrometheusRules (monitoring.coreos.com/v1)
  and its Grafana dashboards as ConfigMaps carrying the Grafana sidecar's label; the operator's CRDs must be there
  (kube-prometheus-stack installs them).
- `hyperpod-addon`: the HyperPod observability EKS add-on (`amazon-sagemaker-hyperpod-observability`) scrapes into an
  Amazon Managed Service for Prometheus workspace you name; kvtier loads its rules into that workspace
  (`AWS::APS::RuleGroupsNamespace`) and writes its dashboards to dist/ for Amazon Managed Grafana.
- `none`: nothing is applied (rule files and dashboards are still written to dist/ for reference).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.config.base import FieldError, StrictModel

Mode = Literal["prometheus-operator", "hyperpod-addon", "none"]
_AMP_WORKSPACE_ARN = re.compile(r"^arn:aws[a-z-]*:aps:([a-z0-9-]+):(\d{12}):workspace/ws-[A-Za-z0-9-]+$", re.ASCII)
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _labels(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        if len(key) > 253 or not _LABEL_KEY.match(key) or len(val) > 63 or not _LABEL_VALUE.match(val):
            raise ValueError(
                f"'{key}: {val}' is not a Kubernetes label; use keys like release or example.com/name and values of "
                "at most 63 letters, digits, '-', '_' or '.'"
            )
    return value


def _workspace_arn(value: str) -> str:
    if not _AMP_WORKSPACE_ARN.match(value):
        raise ValueError(
            f"'{value}' is not an Amazon Managed Service for Prometheus workspace ARN; write it like "
            "arn:aws:aps:us-west-2:111122223333:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
        )
    return value


Labels = Annotated[dict[str, str], AfterValidator(_labels)]
# vLLM's prompt-length histogram has 1-2-5 buckets (vllm 0.19.0 build_1_2_5_buckets): an alert can only cut there.
PROMPT_BUCKETS = tuple(b * 10**e for e in range(2, 7) for b in (1, 2, 5))


def _prompt_bucket(value: int) -> int:
    if value not in PROMPT_BUCKETS:
        raise ValueError(
            f"{value} is not a bucket boundary of vLLM's prompt-length histogram; use one of "
            f"{', '.join(map(str, PROMPT_BUCKETS))}"
        )
    return value


class PrometheusOperatorConfig(StrictModel):
    # kube-prometheus-stack's Prometheus selects monitors and rules by its Helm release label by default.
    selector_labels: Labels = Field(default_factory=lambda: {"release": "kube-prometheus-stack"})
    # Where Grafana's dashboard sidecar looks, and the label it looks for (Grafana chart: sidecar.dashboards.label).
    dashboards_namespace: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
    dashboard_label: Labels = Field(default_factory=lambda: {"grafana_dashboard": "1"})


class HyperPodAddonConfig(StrictModel):
    amp_workspace_arn: Annotated[str, AfterValidator(_workspace_arn)]

    @property
    def region(self) -> str:
        match = _AMP_WORKSPACE_ARN.match(self.amp_workspace_arn)
        assert match is not None  # validated
        return match.group(1)


class ObservabilityConfig(StrictModel):
    mode: Mode = "none"
    scrape_interval_s: Annotated[int, Field(ge=5, le=300)] = 30
    ttft_p90_slo_ms: Annotated[int, Field(ge=1, le=600_000)] = 2000  # alert when an endpoint's TTFT p90 is above it
    # "Long prompts flow" for the silent-miss alert: requests with more prompt tokens than this.
    long_prompt_tokens: Annotated[int, AfterValidator(_prompt_bucket)] = 1000
    pool_usage_alert_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.85
    prometheus_operator: PrometheusOperatorConfig | None = None
    hyperpod_addon: HyperPodAddonConfig | None = None

    @model_validator(mode="after")
    def _mode_settings(self) -> ObservabilityConfig:
        wanted = {"prometheus-operator": "prometheus_operator", "hyperpod-addon": "hyperpod_addon"}
        for mode, section in wanted.items():
            given = getattr(self, section) is not None
            if self.mode == mode and not given:
                example = (
                    "{dashboards_namespace: monitoring}"
                    if mode == "prometheus-operator"
                    else "{amp_workspace_arn: arn:aws:aps:<region>:<account>:workspace/ws-...}"
                )
                raise FieldError(section, f"mode {mode} needs its settings", f"add {section}: {example}")
            if self.mode != mode and given:
                raise FieldError(section, f"set, but mode is {self.mode}", f"remove it, or set mode: {mode}")
        return self
