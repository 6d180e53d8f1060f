"""Snapshots of the Curvine YAML (what dist/<env>/<stack>/<chart>.yaml holds), and of the LOB helpers' output.

A change here is a change to what runs in the cluster: review the diff, then `pytest --snapshot-update`.
"""

from __future__ import annotations

import pytest
import yaml
from syrupy.assertion import SnapshotAssertion

from kvtier.k8s.base import KvtierChart, chart_app
from kvtier.k8s.curvine import curvine_charts
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR, lob_helpers_chart


class _Dumper(yaml.SafeDumper):
    """dist/'s YAML, with multi-line strings (the TOML, the scripts) as literal blocks so diffs stay reviewable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def as_yaml(chart: KvtierChart) -> str:
    text = yaml.dump_all(chart.manifests(), Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    assert list(yaml.safe_load_all(text)) == chart.manifests()
    return text


@pytest.mark.parametrize("env_name", ["dev", "prod"])
def test_curvine_charts_match_snapshots(env_name: str, snapshot: SnapshotAssertion) -> None:
    env = load_checked(CONFIG_DIR, env_name).env
    for chart in curvine_charts(chart_app(), env):
        assert as_yaml(chart) == snapshot(name=chart.node.id)


def test_lob_helpers_match_snapshot(snapshot: SnapshotAssertion) -> None:
    assert as_yaml(lob_helpers_chart(load_checked(CONFIG_DIR, "dev").env)) == snapshot
