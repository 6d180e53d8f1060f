"""What makes a synth fast without losing a check: the built-in CloudFormation validation plugin is off unless asked
for (cfn-lint runs in the tests instead), and dist/ is written with libyaml's emitter, byte for byte what the
pure-Python emitter writes."""

from __future__ import annotations

from pathlib import Path

import yaml
from aws_cdk import Stack
from aws_cdk import aws_s3 as s3

from kvtier.app import new_app
from kvtier.dist import dump_manifests
from tests.support import Synth


def _synth_one_bucket(outdir: Path, context: dict[str, str] | None = None) -> Path:
    app = new_app(str(outdir), context=context)
    s3.CfnBucket(Stack(app, "OneBucket"), "Bucket")
    app.synth()
    return outdir


def test_builtin_cloudformation_validation_is_off_by_default_and_on_by_flag(tmp_path: Path) -> None:
    # The plugin writes its report next to the templates whenever it runs (aws-cdk-lib 2.275.0).
    assert not (_synth_one_bucket(tmp_path / "default") / "validation-report.json").exists()
    on = _synth_one_bucket(tmp_path / "on", {"cfn_validation": "true"})
    assert (on / "validation-report.json").exists()


def test_dist_yaml_from_libyaml_equals_the_pure_python_emitter(dev: Synth) -> None:
    assert hasattr(yaml, "CSafeDumper"), "PyYAML without libyaml: dist/ falls back to the slow emitter"
    checked = 0
    for stack in dev.stacks.all:
        for chart in stack.outputs.charts:
            docs = stack.outputs.objects(chart)
            assert dump_manifests(docs) == dump_manifests(docs, base=yaml.SafeDumper), chart.node.id
            checked += 1
    assert checked > 5


def test_each_chart_is_rendered_once_per_synth(dev: Synth) -> None:
    for stack in dev.stacks.all:
        assert set(stack.outputs.rendered) == {c.node.id for c in stack.outputs.charts}
