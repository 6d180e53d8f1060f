"""`make bench-setup` without installing anything: every step it times is a make target, and together the steps are
exactly what `make setup` and `make pytest` install (so the timing cannot silently skip or add one)."""

from __future__ import annotations

import re
import subprocess

from tests.support import ROOT
from tools.benchsetup import INSTALLS, STEPS, TEST_ONLY


def _prerequisites(target: str) -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    line = re.search(rf"^{re.escape(target)}:(.*)$", makefile, re.MULTILINE)
    assert line, f"no rule for {target} in the Makefile"
    line_text = line.group(1).replace("$(VENV)", ".venv").replace("$(CHECKOV_VENV)", ".venv-checkov")
    line_text = line_text.replace("$(NCA_VENV)", ".venv-nca").replace("$(AIPERF_VENV)", ".venv-aiperf")
    return set(line_text.split())


def test_every_step_is_a_make_target() -> None:
    for target, _ in (*STEPS, *TEST_ONLY):
        done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, f"make -n {target}: {done.stderr.strip()}"


def test_steps_are_what_setup_and_pytest_install() -> None:
    setup_steps = {target for target, _ in STEPS if target != "setup"}
    assert setup_steps == _prerequisites("setup")
    # promtool and fuse install Debian packages where missing: not part of a timed set-up.
    assert {target for target, _ in TEST_ONLY} == _prerequisites("pytest") - {"setup", "promtool", "fuse"}
    assert set(INSTALLS) <= setup_steps
