"""Upstream documents kvtier uses unchanged, stored as data with where each comes from (docs/references.md).

The AWS Load Balancer Controller's IAM policy: the HyperPod Inference add-on bundles the controller through its Helm
chart dependency `aws-load-balancer-controller` 1.13.2 (aws/sagemaker-hyperpod-cli@011ca927
helm_chart/HyperPodHelmChart/charts/inference-operator/Chart.yaml), which is controller v2.13.2 (aws/eks-charts@a4b8061e
stable/aws-load-balancer-controller/Chart.yaml appVersion). The file is the controller's `docs/install/iam_policy.json`
at that tag, byte for byte; `ALB_POLICY_BLOB` is its git blob id, so a test proves the copy is unchanged.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

ALB_CONTROLLER_VERSION = "v2.13.2"
ALB_CONTROLLER_CHART_VERSION = "1.13.2"
ALB_POLICY_SOURCE = (
    "kubernetes-sigs/aws-load-balancer-controller@ac0e1ffc76adfb6af8342534f13f178a24b65e92:docs/install/iam_policy.json"
)
ALB_POLICY_FILE = f"aws-load-balancer-controller-{ALB_CONTROLLER_VERSION}-iam_policy.json"
ALB_POLICY_BLOB = "761d0e733c41089c91ea009dd29faf71918085e5"  # `git rev-parse v2.13.2:docs/install/iam_policy.json`
COMMERCIAL_ARN = "arn:aws:"  # upstream writes the commercial partition; kvtier substitutes the stack's


def alb_policy_bytes() -> bytes:
    return resources.files(__package__).joinpath(ALB_POLICY_FILE).read_bytes()


def alb_policy() -> dict[str, Any]:
    """The upstream policy document as parsed JSON."""
    document: dict[str, Any] = json.loads(alb_policy_bytes())
    return document


def alb_policy_for_partition(partition: str) -> dict[str, Any]:
    """The upstream document with every `arn:aws:` resource in `partition` (a literal or a CDK token)."""

    def rewrite(value: Any) -> Any:
        if isinstance(value, str):
            return _arn(value, partition)
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        if isinstance(value, dict):
            return {k: rewrite(v) for k, v in value.items()}
        return value

    return {k: rewrite(v) for k, v in alb_policy().items()}


def _arn(value: str, partition: str) -> str:
    return f"arn:{partition}:{value[len(COMMERCIAL_ARN) :]}" if value.startswith(COMMERCIAL_ARN) else value
