"""What makes a synth fast without losing a check: the built-in CloudFormation validation plugin is off unless asked
for (cfn-lint runs in the tests instead), cdk.json runs the app with `python -O` (jsii's runtime argument checks off;
the tests, which run without -O, and mypy check the same) and it synthesizes what the tests synthesize, and dist/ is
written with libyaml's emitter, byte for byte what the pure-Python emitter writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from aws_cdk import Stack
from aws_cdk import aws_s3 as s3

from kvtier.app.dist import dump_manifests
from kvtier.app.main import new_app
from tests.support import CONFIG_DIR, ROOT, Synth


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


# Runs app.py as cdk.json does, then lists the modules it loaded that have no bytecode for this optimization level
# (each of those was compiled from source: the set-up's scripts/compile-optimized.py should have written them).
RUN_AND_LIST_UNCOMPILED = """
import importlib.util, json, os, runpy, sys
app, report = sys.argv[1], sys.argv[2]
sys.argv = [app]
try:
    runpy.run_path(app, run_name="__main__")
except SystemExit as done:
    if done.code:
        raise
level = 1 if sys.flags.optimize else ""
missing = sorted(
    name for name, module in list(sys.modules.items())
    if name != "__main__" and str(getattr(module, "__file__", None) or "").endswith(".py")
    and not os.path.exists(importlib.util.cache_from_source(module.__file__, optimization=level))
)
open(report, "w").write(json.dumps(missing))
"""


def test_cdk_runs_the_app_optimized_from_bytecode_and_it_synthesizes_the_tests_templates(
    dev: Synth, tmp_path: Path
) -> None:
    command = json.loads((ROOT / "cdk.json").read_text(encoding="utf-8"))["app"].split()
    assert command[1:] == ["-O", "app.py"], command
    context = json.dumps({"env": "dev", "config_dir": str(CONFIG_DIR)})
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path / "cdk.out"), "CDK_CONTEXT_JSON": context}
    report = tmp_path / "uncompiled.json"
    done = subprocess.run(
        [sys.executable, *command[1:-1], "-c", RUN_AND_LIST_UNCOMPILED, str(ROOT / "app.py"), str(report)],
        cwd=tmp_path,  # dist/ lands here, not in the repository
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name, template in dev.templates.items():
        written = json.loads((tmp_path / "cdk.out" / f"{name}.template.json").read_text(encoding="utf-8"))
        assert written == template, f"{name}: python -O synthesizes another template"
    written_dist = {p.name for p in (tmp_path / "dist" / "dev").iterdir()}
    assert {"kvtier-dev-platform", "kvtier-dev-retail"} <= written_dist <= set(dev.templates), written_dist
    uncompiled = json.loads(report.read_text(encoding="utf-8"))
    assert not uncompiled, f"compiled from source on every -O synth (run `make setup`): {uncompiled}"
