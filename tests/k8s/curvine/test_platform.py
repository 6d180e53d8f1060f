"""The platform stack applies the Curvine charts: after the cluster stack, in order, the same manifests as dist/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kvtier.app.dist import write_dist
from kvtier.k8s.base import chart_app
from kvtier.k8s.curvine import curvine_charts
from tests.support import Synth

MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
PRUNE_LABEL = "aws.cdk.eks/prune-"


def without_prune_label(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for obj in objs:
        labels = obj["metadata"].get("labels", {})
        for key in [k for k in labels if k.startswith(PRUNE_LABEL)]:
            del labels[key]
    return objs


def curvine_resources(dev: Synth) -> list[tuple[str, dict[str, Any]]]:
    """(logical id, resource) of the Curvine manifests in the platform template, in apply order."""
    found = {k: v for k, v in dev.resources("platform", MANIFEST).items() if k.startswith("Curvine")}
    ordered: list[tuple[str, dict[str, Any]]] = []
    while found:
        ready = [k for k, v in found.items() if not set(v.get("DependsOn", [])) & set(found)]
        assert len(ready) == 1, f"the Curvine manifests must form one chain, got {ready}"
        ordered.append((ready[0], found.pop(ready[0])))
    return ordered


def test_platform_depends_on_the_cluster_stack(dev: Synth) -> None:
    assert dev.stacks.cluster in dev.stacks.platform.dependencies


def test_platform_template_embeds_the_curvine_charts_in_order(dev: Synth) -> None:
    expected = curvine_charts(chart_app(), dev.stacks.platform.config_env)
    resources = curvine_resources(dev)
    assert len(resources) == len(expected)
    for (logical_id, resource), chart in zip(resources, expected, strict=True):
        embedded = json.loads(resource["Properties"]["Manifest"])
        assert without_prune_label(embedded) == chart.manifests(), logical_id
    for (_, later), (earlier_id, _) in zip(resources[1:], resources, strict=False):
        assert earlier_id in later["DependsOn"]


def test_dist_holds_the_same_manifests(dev: Synth, tmp_path: Path) -> None:
    stacks = {s.stack_name: s.outputs for s in dev.stacks.all}
    out = write_dist(tmp_path, "dev", stacks)
    folder = out / "kvtier-dev-platform"
    for chart in curvine_charts(chart_app(), dev.stacks.platform.config_env):
        written = list(yaml.safe_load_all((folder / f"{chart.node.id}.yaml").read_text()))
        assert written == chart.manifests()
    assert "curvine-csi.yaml" in (folder / "README.md").read_text()
