"""Fixtures of the stack tests: the byoc synth (with cdk-nag), shared by the existing-cluster and lint tests."""

from __future__ import annotations

import json

import pytest

from tests.support import Synth, synthesize


@pytest.fixture(scope="session")
def byoc(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """Synthesized with cdk-nag: an unacknowledged finding fails here, listing the findings."""
    outdir = tmp_path_factory.mktemp("cdk-byoc")
    try:
        return synthesize("byoc", outdir, nag=True)
    except RuntimeError:
        report = json.loads((outdir / "validation-report.json").read_text())
        violations = [v["ruleName"] for p in report["pluginReports"] for v in p["violations"]]
        pytest.fail(f"cdk-nag findings on byoc: {violations}")
