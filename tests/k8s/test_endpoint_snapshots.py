"""Snapshots of every LOB manifest (operator and standalone endpoints, policy, L2) and of the platform releases
kvtier writes to dist/, for dev and prod. Update with `pytest --snapshot-update` after an intended change."""

from __future__ import annotations

import pytest
import yaml
from syrupy.assertion import SnapshotAssertion

from tests.support import Synth


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_lob_manifests_match_snapshots(env: str, request: pytest.FixtureRequest, snapshot: SnapshotAssertion) -> None:
    synth: Synth = request.getfixturevalue(env)
    for stack in synth.stacks.lobs:
        for chart in stack.outputs.charts:
            text = yaml.safe_dump_all(chart.manifests(), sort_keys=True)
            assert text == snapshot(name=f"{stack.stack_name}/{chart.node.id}")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_platform_releases_match_snapshots(
    env: str, request: pytest.FixtureRequest, snapshot: SnapshotAssertion
) -> None:
    synth: Synth = request.getfixturevalue(env)
    releases = {
        r.name: {"kind": r.kind, "chart": r.chart, "version": r.version, "namespace": r.namespace, "values": r.values}
        for r in synth.stacks.platform.outputs.releases
        if r.name in ("amazon-sagemaker-hyperpod-inference", "kyverno")
    }
    assert set(releases) == {"amazon-sagemaker-hyperpod-inference", "kyverno"}
    assert yaml.safe_dump(releases, sort_keys=True) == snapshot
