"""The L2 under fault with real engines (tests/engine/chaos.py): `make test-engine` only (marker `engine`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.chaos import RESUME_AFTER, ChaosObserved, chaos

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosObserved]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    yield chaos(python, tmp_path_factory.mktemp("chaos"))


def test_every_fault_answers_with_the_no_cache_tokens(observed: ChaosObserved) -> None:
    assert [p.fault for p in observed.phases] == ["master_down", "slow", "lost", "full"]
    for phase in observed.phases:
        assert phase.under_fault is not None and len(phase.reference) > 0
        assert phase.under_fault.tokens == phase.reference, f"{phase.fault}: different greedy tokens"
    assert observed.dead_answer is not None and observed.dead_answer.tokens == observed.dead_reference


def test_hits_resume_after_master_down_and_slow_worker(observed: ChaosObserved) -> None:
    for phase in observed.phases:
        if phase.fault in RESUME_AFTER:
            assert phase.resumed is not None and phase.resumed.external_hits > 0, phase.fault


def test_the_healer_deletes_nothing_until_fuse_dies_then_exactly_the_engines(observed: ChaosObserved) -> None:
    for phase in observed.phases:
        assert phase.deleted_during == [], phase.fault
    assert observed.healer_deleted_while_fuse_down == [], "a new pod would get no working mount either"
    assert observed.healer_deleted_after_dead == ["kvtier-support/engine-A", "kvtier-support/engine-B"]


def test_the_janitor_keeps_the_budget_while_a_writer_fills_it_and_a_worker_is_lost(observed: ChaosObserved) -> None:
    run = observed.janitor
    assert run.exit_code is None, f"the janitor exited ({run.exit_code}): {run.summaries}"
    assert run.bytes_after_writer <= run.budget_bytes, run.summaries
    assert run.lost_left == [], "the lost worker's files are gone (lost after two passes, or over budget)"


def test_hits_resume_after_the_healer_restarts_the_pods_on_a_new_fuse(observed: ChaosObserved) -> None:
    """FUSE dead: the healer's restart is the fix; the recreated pod on the new FUSE daemon reads the pool again."""
    answer = observed.after_restart
    assert answer is not None and answer.tokens == observed.dead_reference
    assert answer.external_hits > 0, "the recreated engine read nothing from L2 after the FUSE restart"
