"""Helpers shared by test modules: paths, ../shared access, and one-shot synthesis of an environment."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "config"
SHARED = ROOT.parent / "shared"
# jsii runs on the Node release pinned in package.json (Node 20 is end-of-life for it).
os.environ["PATH"] = f"{ROOT / 'node_modules' / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def shared_path(relative: str) -> Path:
    """A file under ../shared: skip (saying why) only when absent outside CI; under CI its absence fails."""
    path = SHARED / relative
    if path.exists():
        return path
    message = f"{path} is absent (the read-only ../shared folder of reference data)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must have it")
    pytest.skip(f"{message}; it ships with the CI workspace, not with a fresh clone")
    raise AssertionError("unreachable")


@dataclass
class Synth:
    """One synthesized environment: templates by stack name, and the assembly folder."""

    outdir: Path
    stacks: Any  # kvtier.stacks.EnvironmentStacks: the constructs, for tests that inspect charts
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)

    def template(self, kind: str) -> dict[str, Any]:
        return next(t for name, t in self.templates.items() if name.endswith(f"-{kind}"))

    def resources(self, kind: str, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template(kind)["Resources"].items() if v["Type"] == type_}

    def only(self, kind: str, type_: str) -> dict[str, Any]:
        found = list(self.resources(kind, type_).values())
        assert len(found) == 1, f"expected one {type_} in {kind}, found {len(found)}"
        return found[0]


def synthesize(env_name: str, outdir: Path, config_dir: Path = CONFIG_DIR, *, nag: bool = False) -> Synth:
    """Synthesize one environment into `outdir`. With `nag`, cdk-nag's report lands in `outdir/validation-report.json`;
    a synth that cdk-nag fails still returns its templates (the validation runs on the written assembly), so one synth
    serves the nag tests and every template test, and the nag tests say what failed."""
    from kvtier.app import build, new_app
    from kvtier.rules import load_checked

    app = new_app(str(outdir), nag=nag)
    stacks = build(app, load_checked(config_dir, env_name))
    try:
        app.synth()
    except RuntimeError as err:
        if not (nag and ("Validation failed" in str(err) or "ValidationFailed" in str(err))):
            raise
    synth = Synth(outdir=outdir, stacks=stacks)
    manifest = json.loads((outdir / "manifest.json").read_text())
    for name, artifact in manifest["artifacts"].items():
        if artifact["type"] == "aws:cloudformation:stack":
            template = outdir / artifact["properties"]["templateFile"]
            synth.templates[name] = json.loads(template.read_text())
    return synth
