"""Snapshots of every synthesized template, asset hashes scrubbed (they change whenever CDK bumps a handler)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from tests.support import Synth

_HASH = re.compile(r"[0-9a-f]{64}")


def scrub(template: dict[str, Any]) -> Any:
    return json.loads(_HASH.sub("<asset-hash>", json.dumps(template, sort_keys=True)))


@pytest.fixture()
def json_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_templates_match_snapshots(env: str, request: pytest.FixtureRequest, json_snapshot: SnapshotAssertion) -> None:
    synth: Synth = request.getfixturevalue(env)
    for name in sorted(synth.templates):
        assert scrub(synth.templates[name]) == json_snapshot(name=name)
