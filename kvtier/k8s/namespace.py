"""A line of business's namespace `kvtier-<lob>` (design "Names and limits") and its Pod Security Admission labels.

Pod Security (docs/security.md, row 3): a namespace whose pods are all kvtier's (standalone endpoints, router,
janitor, benchmark Jobs) enforces `baseline`, the strictest level every one of them passes (the vLLM engine runs as
root, which `restricted` refuses: tests/k8s/test_pod_security.py), and warns and audits at `restricted`. A namespace
with operator endpoints also runs pods the HyperPod Inference Operator renders, which cannot be checked offline and
are reported to mount hostPath `/dev/shm` (docs/references.md): no level is documented for them, so there it only
warns and audits at `baseline`, and kvtier's ClusterPolicy (kvtier/k8s/lob_admission.py) refuses what would reach
the pool or the node. Without an `enforce` label a namespace admits privileged pods (Kubernetes "Pod Security
Admission": the default level is privileged, and EKS sets no cluster-wide default).
"""

from __future__ import annotations

from typing import Any

from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.breaks import admission_broken
from kvtier.naming import lob_namespace

LOB_LABEL = "kvtier.io/line-of-business"
PSA_PREFIX = "pod-security.kubernetes.io/"
PSA_MODES = ("enforce", "warn", "audit")


def psa_labels(*, operator_pods: bool) -> dict[str, str]:
    """The namespace's Pod Security Admission labels (module doc)."""
    if admission_broken("psa"):  # the old namespace: no label, so privileged
        return {}
    if operator_pods:
        return {f"{PSA_PREFIX}warn": "baseline", f"{PSA_PREFIX}audit": "baseline"}
    return {f"{PSA_PREFIX}enforce": "baseline", f"{PSA_PREFIX}warn": "restricted", f"{PSA_PREFIX}audit": "restricted"}


def lob_namespace_object(lob: str, *, operator_pods: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": lob_namespace(lob), "labels": {LOB_LABEL: lob, **psa_labels(operator_pods=operator_pods)}},
    }


def add_namespace(chart: KvtierChart, lob: str, *, operator_pods: bool) -> None:
    api_object(chart, "namespace", lob_namespace_object(lob, operator_pods=operator_pods))
