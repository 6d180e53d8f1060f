"""The engine groups a session shares (tests/engine/shared_groups.py), as session fixtures.

A test module uses a group by naming its fixture in its module fixture and calling `.get()` there, after anything
that could skip it (creating the fixture starts nothing). The users of one group run one after another, and the
group's engines stop after the last of them (shared_groups.run_together, close_after_last_user).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.lmcache_replicas import Replicas, start_replicas
from tests.engine.shared_groups import SharedGroup, close_after_last_user, run_together, shared

SHARED_FIXTURES = ("shared_replicas",)


def _engine_python() -> str:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    return python


@pytest.fixture(scope="session")
def shared_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedGroup[Replicas]]:
    """A, B and C of the example's standalone LMCache endpoint (lmcache_replicas.py); each start in a new folder."""
    python = _engine_python()

    def start() -> Replicas:
        return start_replicas(python, tmp_path_factory.mktemp("lmcache-replicas"))

    with shared("shared_replicas", "lmcache replicas", start) as group:
        yield group


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = run_together(items, SHARED_FIXTURES)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    close_after_last_user(item, nextitem)
