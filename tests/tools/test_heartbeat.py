"""tests/heartbeat.py, the pytest plugin `make pytest` loads: silence longer than its interval gets a line saying
what runs, in a log that is not a terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def _pytest(tmp_path: Path, *args: str) -> str:
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_quick():\n    pass\n\ndef test_slow():\n    time.sleep(3)\n"
    )
    env = {**os.environ, "KVTIER_HEARTBEAT_S": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_long_test_gets_heartbeat_lines(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "-p", "tests.heartbeat", "test_slow.py")
    beats = [line for line in out.splitlines() if line.startswith("[heartbeat] still running test_slow.py::test_slow")]
    assert len(beats) >= 2, out
    assert "test_quick" not in "".join(beats)


def test_without_the_plugin_a_long_test_is_silent(tmp_path: Path) -> None:
    assert "[heartbeat]" not in _pytest(tmp_path, "test_slow.py")
