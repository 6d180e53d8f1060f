"""dist/: every synth writes each chart as plain YAML and lists releases, atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.app.dist import write_dist
from kvtier.constructs.manifests import HelmRelease, StackOutputs
from kvtier.k8s.base import KvtierChart, api_object, chart_app


def _outputs() -> StackOutputs:
    chart = KvtierChart(chart_app(), "demo", namespace="demo")
    api_object(
        chart,
        "cm",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "1", "b": "x\ny\n"}},
    )
    release = HelmRelease("helm", "kyverno", "kyverno", "3.9.0", "kyverno", {"replicas": 1}, "chart repo")
    return StackOutputs(charts=[chart], releases=[release])


def test_charts_and_releases_are_written(tmp_path: Path) -> None:
    target = write_dist(
        tmp_path / "dist", "dev", {"kvtier-dev-platform": _outputs(), "kvtier-dev-network": StackOutputs()}
    )
    [doc] = list(yaml.safe_load_all((target / "kvtier-dev-platform" / "demo.yaml").read_text()))
    assert doc["kind"] == "ConfigMap" and doc["metadata"]["namespace"] == "demo"
    assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kvtier"
    assert doc["data"]["b"] == "x\ny\n"
    assert "b: |\n" in (target / "kvtier-dev-platform" / "demo.yaml").read_text()  # multi-line text as a block
    readme = (target / "kvtier-dev-platform" / "README.md").read_text()
    assert "| helm | kyverno | kyverno | 3.9.0 | kyverno | chart repo |" in readme
    assert '"replicas": 1' in readme
    assert not (target / "kvtier-dev-network").exists()  # nothing to list


def test_a_failed_write_leaves_the_previous_output_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "dist"
    write_dist(root, "dev", {"kvtier-dev-platform": _outputs()})
    before = (root / "dev" / "kvtier-dev-platform" / "demo.yaml").read_text()

    def broken(*_args: Any, **_kwargs: Any) -> str:
        raise OSError("disk full")

    monkeypatch.setattr("kvtier.app.dist.yaml.dump_all", broken)
    with pytest.raises(OSError, match="disk full"):
        write_dist(root, "dev", {"kvtier-dev-platform": _outputs()})
    assert (root / "dev" / "kvtier-dev-platform" / "demo.yaml").read_text() == before
    assert sorted(p.name for p in root.iterdir()) == ["dev"]  # no staging folder left behind


def test_cluster_scoped_objects_carry_no_namespace() -> None:
    chart = KvtierChart(chart_app(), "scoped", namespace="kvtier-retail")
    api_object(chart, "pv", {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "v"}, "spec": {}})
    api_object(chart, "cm", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    pv, cm = chart.manifests()
    assert "namespace" not in pv["metadata"]
    assert cm["metadata"]["namespace"] == "kvtier-retail"
