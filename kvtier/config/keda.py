"""`keda` section of the environment file: where the KEDA that scales standalone endpoints comes from, and which
Prometheus it asks for kvtier's signals (docs/endpoints.md "Autoscaling").

Operator endpoints always use the KEDA of the HyperPod Inference Operator add-on (its `keda` chart, installed in
`hyperpod-inference-system`; docs/references.md "Issue 27"), and query only Amazon Managed Prometheus.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvtier.config.base import StrictModel
from kvtier.config.observability import ObservabilityConfig

# inference-operator: the KEDA the add-on installs (kvtier installs the add-on: `install.inference_operator`);
# existing: a KEDA the cluster already runs (at least KEDA_VERSION's CRDs); none: no KEDA, so no autoscaling.
KedaSource = Literal["inference-operator", "existing", "none"]


class KedaConfig(StrictModel):
    source: KedaSource = "inference-operator"
    # The in-cluster Prometheus that holds kvtier's recording rules (observability mode prometheus-operator), for the
    # signals of standalone endpoints, e.g. http://kube-prometheus-stack-prometheus.monitoring:9090. With the
    # hyperpod-addon mode KEDA queries the Amazon Managed Prometheus workspace instead.
    prometheus_url: Annotated[str | None, Field(pattern=r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[^\s]*)?$")] = None


def amp_query_url(observability: ObservabilityConfig) -> str | None:
    """The AMP workspace's query endpoint (KEDA appends /api/v1/query), when the environment scrapes into AMP."""
    addon = observability.hyperpod_addon
    if addon is None:
        return None
    workspace = addon.amp_workspace_arn.rsplit("/", 1)[1]
    return f"https://aps-workspaces.{addon.region}.amazonaws.com/workspaces/{workspace}"


def signal_server(observability: ObservabilityConfig, keda: KedaConfig, mode: str) -> str | None:
    """Where KEDA reads kvtier's signals for an endpoint of `mode`: AMP in operator mode (the CRD's serverAddress
    accepts nothing else), AMP or the in-cluster Prometheus in standalone mode. None: nowhere."""
    amp = amp_query_url(observability)
    if mode == "operator" or amp is not None:
        return amp
    return keda.prometheus_url
