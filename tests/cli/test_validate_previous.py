"""Issue 39: `kvtier validate -e <env> --previous DIR` with another environment's cdk.out fails in one line naming the
folder, at once: the stack names in its manifest are checked against the config's before the ~10 s synth."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kvtier.cli import main as cli
from kvtier.ops.status import expected_stacks
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR, Synth


class SynthesizedError(Exception):
    """Raised by the stand-in synth: the command got past the environment check."""


def _cdk_out(folder: Path, stacks: set[str]) -> Path:
    """A minimal cdk.out: a manifest naming `stacks`, each with an empty template."""
    folder.mkdir()
    artifacts = {}
    for name in sorted(stacks):
        (folder / f"{name}.template.json").write_text("{}")
        artifacts[name] = {"type": "aws:cloudformation:stack", "properties": {"templateFile": f"{name}.template.json"}}
    (folder / "manifest.json").write_text(json.dumps({"version": "40.0.0", "artifacts": artifacts}))
    return folder


@pytest.fixture()
def no_synth(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvtier.app.main

    def synth(*_args: object, **_kwargs: object) -> None:
        raise SynthesizedError

    monkeypatch.setattr(kvtier.app.main, "new_app", synth)
    monkeypatch.setattr(kvtier.app.main, "build", synth)


def _validate(previous: Path) -> int:
    return cli(["validate", "-e", "dev", "--config-dir", str(CONFIG_DIR), "--previous", str(previous)])


@pytest.mark.usefixtures("no_synth")
def test_another_environments_synth_fails_in_one_line_before_synthesizing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prod = _cdk_out(tmp_path / "cdk.out", expected_stacks(load_checked(CONFIG_DIR, "prod").env))
    start = time.monotonic()
    assert _validate(prod) == 2  # not SynthesizedError: no synth ran
    assert time.monotonic() - start < 5.0
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"kvtier validate: {prod}: its stacks (kvtier-prod-"), line
    assert "are not this environment's (kvtier-dev-" in line and line.endswith("pass a synth of environment dev")


@pytest.mark.usefixtures("no_synth")
def test_this_environments_synth_goes_on_to_synthesize(tmp_path: Path) -> None:
    dev = _cdk_out(tmp_path / "cdk.out", expected_stacks(load_checked(CONFIG_DIR, "dev").env))
    with pytest.raises(SynthesizedError):
        _validate(dev)


def test_the_expected_stacks_are_the_synthesized_ones(dev: Synth) -> None:
    """The check above trusts status.expected_stacks: it must name exactly the stacks a synth writes."""
    assert expected_stacks(load_checked(CONFIG_DIR, "dev").env) == set(dev.templates)
