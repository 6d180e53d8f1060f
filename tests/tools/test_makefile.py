"""`make test` in a CI log: pytest's progress shows while the suite runs (not one block after ~5 minutes, as make's
--output-sync=target gave), lint's lines come as one block with its verdict the moment lint ends (not after the whole
suite), and either failing fails the target.

The real Makefile runs in a scratch folder whose venvs hold stand-ins: `python -m pytest` prints a line, waits, and
prints another; ruff and mypy print one line each. Nothing is installed (every set-up stamp is newer than its inputs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import ROOT

PAUSE_S = 3.0
SETUP_INPUTS = (
    "requirements.txt", "requirements-dev.txt", "requirements-checkov.txt", "requirements-nca.txt",
    "requirements-aiperf.txt", "pyproject.toml", "package.json", "package-lock.json", "scripts/install-venv.sh",
    "scripts/compile-optimized.py",
)  # fmt: skip
STAMPS = (
    ".venv/.installed",
    "node_modules/.installed",
    ".venv/.optimized",
    ".venv-checkov/.installed",
    ".venv-nca/.installed",
    ".venv-aiperf/.installed",
)


def _tool(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def _scratch(tmp_path: Path, *, lint_exit: int = 0) -> Path:
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copy2(ROOT / "Makefile", work / "Makefile")
    old = time.time() - 3600
    for name in SETUP_INPUTS:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("")
        os.utime(work / name, (old, old))
    for stamp in STAMPS:
        (work / stamp).parent.mkdir(parents=True, exist_ok=True)
        (work / stamp).touch()
    _tool(
        work / ".venv/bin/python",
        f'if [ "$2" = pytest ]; then echo "pytest: first line"; sleep {PAUSE_S}; echo "pytest: last line"; fi',
    )
    _tool(work / ".venv/bin/ruff", f'echo "ruff: $1"; exit {lint_exit}')
    _tool(work / ".venv/bin/mypy", 'echo "mypy: checked"')
    _tool(tmp_path / "bin/promtool", "exit 0")
    return work


def _make_test(work: Path) -> tuple[int, list[tuple[float, str]]]:
    env = {**os.environ, "PATH": f"{work.parent / 'bin'}:{os.environ['PATH']}", "MAKEFLAGS": ""}
    process = subprocess.Popen(
        ["make", "--no-print-directory", "test"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    lines = []
    try:
        start = time.monotonic()
        for line in process.stdout:
            lines.append((time.monotonic() - start, line.rstrip("\n")))
        code = process.wait(timeout=60)
    finally:
        process.kill()
    return code, lines


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_pytest_output_streams_and_lint_is_one_block(tmp_path: Path) -> None:
    code, lines = _make_test(_scratch(tmp_path))
    text = [line for _, line in lines]
    assert code == 0, text
    when = {line: at for at, line in lines}
    # The first pytest line reached the log while pytest was still running, not when it ended.
    assert when["pytest: last line"] - when["pytest: first line"] >= PAUSE_S - 0.5, lines
    block = text.index("---- make lint (ran beside pytest): passed ----")
    end = text.index("---- end of make lint ----")
    # The stand-in linters end at once, pytest pauses PAUSE_S: the verdict is in the log while pytest still runs.
    assert block < end < text.index("pytest: last line"), text
    assert {"ruff: check", "ruff: format", "mypy: checked"} <= set(text[block:end])


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_lint_failure_fails_make_test(tmp_path: Path) -> None:
    code, lines = _make_test(_scratch(tmp_path, lint_exit=1))
    text = [line for _, line in lines]
    assert code != 0
    assert "pytest: last line" in text  # the suite still ran to its end
    assert "---- make lint (ran beside pytest): FAILED (exit 2) ----" in text, text
    assert any(line.startswith("make test: lint failed") for line in text), text


def test_the_venv_install_says_each_step_and_beats_while_one_runs(tmp_path: Path) -> None:
    """scripts/install-venv.sh with stand-in installers (pip installs uv, uv takes 2.5 s for the pins): every step
    is announced with what it installs, a slow one prints a heartbeat, and each ends with its time."""
    venv = tmp_path / "venv"
    _tool(venv / "bin/python", "exit 0")  # `python -m pip install uv==...`
    _tool(venv / "bin/uv", 'case " $* " in *" -r "*) sleep 2.5;; esac')
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/install-venv.sh"), str(venv), "requirements-dev.txt", "lmcache==0.4.3"],
        cwd=ROOT, env={**os.environ, "KVTIER_HEARTBEAT_S": "1"}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    pins = sum(
        1 for name in ("requirements.txt", "requirements-dev.txt") for line in (ROOT / name).read_text().splitlines()
        if "==" in line
    )  # fmt: skip
    assert lines[0] == f"install-venv: step 1/3: uv (the installer) into {venv} ..."
    step2 = next(line for line in lines if "step 2/3" in line)
    assert f"step 2/3: {pins} pinned packages of requirements-dev.txt with uv" in step2
    assert "install-venv:   still on step 2/3 (1 s)" in lines, lines
    assert "install-venv: step 3/3: lmcache==0.4.3 (without dependencies) and kvtier itself (editable) ..." in lines
    assert lines[-1].startswith("install-venv: step 3/3 done in ")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_first_make_synth_says_what_it_will_install(tmp_path: Path) -> None:
    work = tmp_path / "fresh"
    work.mkdir()
    shutil.copy2(ROOT / "Makefile", work / "Makefile")
    first = subprocess.run(
        ["make", "-n", "synth"], cwd=work, capture_output=True, text=True, timeout=60, check=False
    )  # -n: only what it would run (nothing to install here: the inputs are absent)
    assert first.stdout.startswith("make: first run in this clone: installing .venv/"), first.stdout
    (work / ".venv").mkdir()
    (work / ".venv/.installed").touch()
    again = subprocess.run(["make", "-n", "synth"], cwd=work, capture_output=True, text=True, timeout=60, check=False)
    assert "first run" not in again.stdout


def test_the_bytecode_step_beats_while_it_compiles(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util
    import threading

    spec = importlib.util.spec_from_file_location("compile_optimized", ROOT / "scripts/compile-optimized.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HEARTBEAT_S", 0.1)
    stop = threading.Event()
    beat = threading.Thread(target=module._heartbeat, args=(stop, time.monotonic()))
    beat.start()
    time.sleep(0.35)
    stop.set()
    beat.join(timeout=5)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 2 and all(line.startswith("compile-optimized:   still compiling (") for line in lines)
