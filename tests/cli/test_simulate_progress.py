"""`kvtier simulate` off a terminal (a CI log, a pipe) prints plain progress lines instead of nothing (issue 39:
a 400k-line trace ran 98 s without a line when stderr was not a terminal)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvtier.cli.simulate as simulate_cli
from kvtier.cli import main
from tests.support import SAMPLE_TRACE


def test_progress_lines_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(simulate_cli, "PROGRESS_MIN_REQUESTS", 1)  # as if the trace were long
    monkeypatch.setattr(simulate_cli, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(simulate_cli, "PROGRESS_LINE_S", 0.0)
    argv = ["simulate", "-e", "dev", "--lob", "retail", "--endpoint", "qwen3-8b", "--trace", str(SAMPLE_TRACE)]
    assert main([*argv, "--no-plots", "--routing", "roundrobin", "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert f"kvtier simulate: reading {SAMPLE_TRACE.name} (bytes) ..." in err
    assert "kvtier simulate: simulating ..." in err
    assert any(line.startswith("kvtier simulate: simulating: ") and "(" in line for line in err), err
