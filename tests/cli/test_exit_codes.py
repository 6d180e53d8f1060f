"""Cross-check messages as users see them: `kvtier validate` and `cdk synth` print the same lines, exit 2, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kvtier.cli import main as cli

# `<file>: <field>: <problem>; <what is allowed>` (the first line carries the command's prefix).
LINE = re.compile(
    r"^(?:kvtier (?:validate|synth): )?(?P<file>\S+\.yaml): (?P<field>\S+): (?P<problem>.+?); (?P<allowed>.+)$"
)


def _break_quota(config_dir: Path) -> None:
    path = config_dir / "lobs" / "retail.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["gpu_quota"] = 1
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_validate_prints_file_field_and_fix(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _break_quota(config_copy)
    code = cli(["validate", "-e", "dev", "--config-dir", str(config_copy)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    match = LINE.match(lines[0])
    assert match is not None
    assert match["file"] == str(config_copy / "lobs" / "retail.yaml")
    assert match["field"] == "gpu_quota"
    assert "raise gpu_quota to at least 3" in match["allowed"]


def test_validate_json_lists_the_same_problem(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    _break_quota(config_copy)
    assert cli(["validate", "-e", "dev", "--config-dir", str(config_copy), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False
    assert [e["field"] for e in data["errors"]] == ["gpu_quota"]


def test_warnings_print_and_exit_zero(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_copy / "environments" / "dev.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["hyperpod"]["instance_groups"][1]["count"] = 2  # the 2 retail replicas hold every GPU: no room to roll
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert cli(["validate", "-e", "dev", "--config-dir", str(config_copy)]) == 0
    out, err = capsys.readouterr()
    assert "configuration is valid" in out
    warnings = err.strip().splitlines()
    assert warnings and all(w.startswith("warning: ") and LINE.match(w.removeprefix("warning: ")) for w in warnings)
    assert any("rolling update stalls" in w for w in warnings)


def test_synth_prints_the_same_lines(
    config_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`cdk synth` runs app.py -> kvtier.app.main.main, which uses the same loader (no stacks are built on errors)."""
    from kvtier.app.main import main as synth

    _break_quota(config_copy)
    cli(["validate", "-e", "dev", "--config-dir", str(config_copy)])
    validate_err = capsys.readouterr().err
    monkeypatch.setenv("KVTIER_CONFIG_DIR", str(config_copy))
    monkeypatch.setenv("CDK_OUTDIR", str(tmp_path / "cdk.out"))
    monkeypatch.chdir(tmp_path)
    assert synth() == 2
    synth_err = capsys.readouterr().err
    assert "Traceback" not in synth_err
    assert synth_err.removeprefix("kvtier synth: ") == validate_err.removeprefix("kvtier validate: ")
