"""Session fixtures: one synth per environment per test session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import CONFIG_DIR, Synth, synthesize


@pytest.fixture(scope="session")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return synthesize("dev", tmp_path_factory.mktemp("cdk-dev"))


@pytest.fixture(scope="session")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    # With cdk-nag: the same synth serves the template tests and the nag tests (tests/stacks/test_lint.py).
    return synthesize("prod", tmp_path_factory.mktemp("cdk-prod"), nag=True)


@pytest.fixture()
def config_copy(tmp_path: Path) -> Iterator[Path]:
    """A writable copy of config/ for tests that break or extend it."""
    target = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, target)
    yield target
