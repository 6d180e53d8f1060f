"""Quiet runs: every CDK feature flag is set (the recommended value, or a reviewed exception), `make synth` ends with
the activate hint and without the CLI's stack-id line, jsii runs on the project's Node (no end-of-life banner printed
as Python bytes), and pytest prints why tests skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtier.app.feature_flags import FEATURE_FLAGS, RECOMMENDED_ELSEWHERE
from kvtier.app.jsii_node import CHECKOUT, prefer_project_node
from tests.support import ROOT, Synth


def flag_report(outdir: Path) -> dict[str, Any]:
    manifest = json.loads((outdir / "manifest.json").read_text(encoding="utf-8"))
    report = manifest["artifacts"]["aws-cdk-lib/feature-flag-report"]["properties"]["flags"]
    assert len(report) > 80  # the report aws-cdk-lib writes into every cloud assembly
    return dict(report)


def needs_attention(report: dict[str, Any]) -> list[str]:
    """What the CDK CLI counts in "N feature flags are not configured": unset, and unset differs from recommended."""
    return sorted(
        name
        for name, flag in report.items()
        if "userValue" not in flag
        and "unconfiguredBehavesLike" in flag
        and flag["unconfiguredBehavesLike"].get("v2") != flag.get("recommendedValue")
    )


def test_no_feature_flag_is_left_unconfigured(dev: Synth) -> None:
    assert needs_attention(flag_report(dev.outdir)) == []


def test_flags_differ_from_the_recommendation_only_where_reviewed(dev: Synth) -> None:
    report = flag_report(dev.outdir)
    recommended = {name: flag["recommendedValue"] for name, flag in report.items() if "recommendedValue" in flag}
    assert set(FEATURE_FLAGS) <= set(recommended)  # no flag this aws-cdk-lib does not know
    differ = {name for name, value in FEATURE_FLAGS.items() if value != recommended[name]}
    assert differ == RECOMMENDED_ELSEWHERE
    assert {name: report[name].get("userValue") for name in FEATURE_FLAGS} == FEATURE_FLAGS


def fake_cdk(tmp_path: Path, code: int) -> Path:
    """A `cdk` that prints what the real CLI prints after a synth of several stacks, and exits with `code`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "cdk"
    script.write_text(
        "#!/bin/sh\n"
        "echo 'Successfully synthesized to cdk.out' >&2\n"
        "echo 'Supply a stack id (kvtier-dev-network, kvtier-dev-cluster) to display its template.' >&2\n"
        f"exit {code}\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("code", [0, 3])
def test_make_synth_drops_the_stack_id_line_keeps_the_exit_code_and_prints_the_hint(tmp_path: Path, code: int) -> None:
    bin_dir = fake_cdk(tmp_path, code)
    path = f"PATH={bin_dir}{os.pathsep}{os.environ['PATH']}"  # a command-line variable beats the Makefile's PATH
    done = subprocess.run(
        ["make", "-s", "-o", "setup", "synth", path], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    output = done.stdout + done.stderr
    assert "Successfully synthesized" in output
    assert "Supply a stack id" not in output
    if code == 0:
        assert done.returncode == 0, output
        assert output.count("source .venv/bin/activate") == 1
    else:
        assert done.returncode != 0, output


def test_jsii_gets_the_projects_node_unless_one_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv first, so that monkeypatch records the variable's original state and restores it (prefer_project_node
    # sets it itself; without this, the fake node below leaked into every later test's subprocesses)
    monkeypatch.setenv("JSII_NODE", "")
    monkeypatch.delenv("JSII_NODE")
    here = tmp_path / "node_modules" / ".bin"
    here.mkdir(parents=True)
    node = here / "node"
    node.write_text("#!/bin/sh\n", encoding="utf-8")
    node.chmod(0o755)
    assert prefer_project_node(tmp_path) == node
    assert os.environ["JSII_NODE"] == str(node)
    monkeypatch.setenv("JSII_NODE", "/opt/my/node")
    assert prefer_project_node(tmp_path) is None
    assert os.environ["JSII_NODE"] == "/opt/my/node"


def system_path_without_project_node() -> str:
    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "node_modules" not in p)


@pytest.mark.skipif(
    not (CHECKOUT / "node_modules" / ".bin" / "node").exists(), reason="no node_modules (run make setup)"
)
def test_no_jsii_banner_printed_as_bytes(tmp_path: Path) -> None:
    """Start a jsii kernel (the small `constructs` library) the way `kvtier validate --previous` does, from a folder
    without node_modules and with only the system's Node on PATH."""
    env = {k: v for k, v in os.environ.items() if k != "JSII_NODE"}
    env["PATH"] = system_path_without_project_node()
    program = "from kvtier.app.jsii_node import prefer_project_node; prefer_project_node(); import constructs"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    assert "b'!!" not in done.stderr and "end-of-life" not in done.stderr, done.stderr


def test_the_old_way_prints_the_banner_as_bytes_on_an_old_system_node(tmp_path: Path) -> None:
    """What the fix avoids, shown where the system's Node is one jsii calls end-of-life (Node 20 for jsii 1.142)."""
    env = {k: v for k, v in os.environ.items() if k != "JSII_NODE"}
    env["PATH"] = system_path_without_project_node()
    node = shutil.which("node", path=env["PATH"])
    version = (
        subprocess.run([node, "--version"], check=False, capture_output=True, text=True, timeout=30).stdout
        if node
        else ""
    )
    if not version.startswith("v20."):
        pytest.skip(f"the system Node is {version.strip() or 'absent'}, not an end-of-life one")
    done = subprocess.run(
        [sys.executable, "-c", "import constructs"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "b'!!" in done.stderr


def test_pytest_prints_skip_reasons(tmp_path: Path) -> None:
    test = tmp_path / "test_skips.py"
    test.write_text("import pytest\n\ndef test_it():\n    pytest.skip('the reason to show')\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(test)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "SKIPPED [1]" in done.stdout and "the reason to show" in done.stdout, done.stdout
