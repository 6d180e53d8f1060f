"""A reader that leaves (`kvtier plan | head -1`): kvtier stops quietly with the shell's code for SIGPIPE.

The child gets only the write end of a pipe whose read end is already closed, so its first write fails every time:
no dependence on how much fits in the pipe buffer or on who runs first.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvtier.cli import READER_GONE
from tests.support import CONFIG_DIR, ROOT


def _run_into_closed_pipe(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kvtier", *args, "--config-dir", str(CONFIG_DIR)],
            cwd=ROOT,
            check=False,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )
    finally:
        os.close(write_end)
    return done.returncode, done.stderr


@pytest.mark.parametrize("view", [[], ["--wide"], ["--json"]])
def test_plan_into_a_closed_pipe_exits_141_without_a_word(view: list[str]) -> None:
    code, err = _run_into_closed_pipe("plan", "-e", "dev", *view)
    # The configuration's own warnings go to stderr before any output (the example's images are tags: issue 34).
    said = [line for line in err.splitlines() if not line.startswith(f"warning: {CONFIG_DIR}")]
    assert (code, said) == (READER_GONE, [])
    assert READER_GONE == 128 + 13  # what `seq 99999 | head -1` leaves in PIPESTATUS: 128 + SIGPIPE


def test_the_break_switch_brings_back_the_traceback() -> None:
    code, err = _run_into_closed_pipe("plan", "-e", "dev", "--json", env={"KVTIER_PIPE_BREAK": "1"})
    assert code != READER_GONE and "BrokenPipeError" in err
