"""promtool from Debian's `prometheus` package (the Makefile installs it where missing): found, or a skip outside CI
that says why, or a failure under CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

TIMEOUT_S = 120


def promtool() -> str:
    found = shutil.which("promtool")
    if found is not None:
        return found
    message = "promtool is not installed (apt-get install prometheus; `make test` does it)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI must have it")
    pytest.skip(message)
    raise AssertionError("unreachable")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
