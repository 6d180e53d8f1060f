"""What every kvtier chart shares: stable names, common labels, and a standalone cdk8s app to live in."""

from __future__ import annotations

from typing import Any

import cdk8s

CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "PersistentVolume",
        "StorageClass",
        "CSIDriver",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "CustomResourceDefinition",
        "ClusterPolicy",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
)
PART_OF = {"app.kubernetes.io/part-of": "kvtier", "app.kubernetes.io/managed-by": "kvtier"}


def chart_app() -> cdk8s.App:
    """A cdk8s app that is never synthesized to disk by cdk8s itself: stacks and the dist writer read charts."""
    return cdk8s.App()


class KvtierChart(cdk8s.Chart):
    """A chart with stable object names (no hash suffixes) and kvtier's labels on every object."""

    def __init__(self, scope: cdk8s.App, id: str, *, namespace: str | None = None) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True, labels=dict(PART_OF), namespace=namespace)
        self.chart_id = id  # kept on the Python side: every `node.id` is a round trip to the jsii kernel

    def manifests(self) -> list[dict[str, Any]]:
        """The chart's objects as plain dicts (what EKS applies and dist/ holds). Cluster-scoped objects lose the
        chart's namespace, which Kubernetes would ignore anyway, so the files say what the cluster holds."""
        out = []
        for raw in self.to_json():
            obj = dict(raw)
            if obj.get("kind") in CLUSTER_SCOPED and "namespace" in obj.get("metadata", {}):
                obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "namespace"}
            out.append(obj)
        return out


def api_object(chart: cdk8s.Chart, id: str, body: dict[str, Any]) -> cdk8s.ApiObject:
    """An object from a full body: cdk8s's Python ApiObject takes no `spec=`, so the rest goes in as patches."""
    metadata = dict(body.get("metadata", {}))
    obj = cdk8s.ApiObject(
        chart,
        id,
        api_version=body["apiVersion"],
        kind=body["kind"],
        metadata=cdk8s.ApiObjectMetadata(**_meta(metadata)),
    )
    patches = [cdk8s.JsonPatch.add(f"/{k}", v) for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")]
    if patches:
        obj.add_json_patch(*patches)  # one round trip to the jsii kernel for all of them
    return obj


def _meta(metadata: dict[str, Any]) -> dict[str, Any]:
    names = {"name": "name", "namespace": "namespace", "labels": "labels", "annotations": "annotations"}
    unknown = set(metadata) - set(names)
    if unknown:
        raise ValueError(f"unsupported metadata keys {sorted(unknown)}")
    return {names[k]: v for k, v in metadata.items()}
