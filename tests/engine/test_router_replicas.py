"""Two router replicas for real (issue 38): vllm-router 0.1.17 twice with kvtier's flags in front of two real
vLLM-CPU + LMCache engines with a shared L2, requests spread over the replicas at random (router_replicas.py).

Collected only by `make test-engine` (marker `engine`). KVTIER_ROUTER_REPLICAS_REPORT writes what was observed as
JSON, with the per-run summary (the numbers docs/endpoints.md "Two routers" and docs/benchmarks.md quote).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine import router_install
from tests.engine.router_replicas import PREFIX_TOKENS, ReplicasObserved, as_json, replicas_scenario

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicasObserved]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    site = router_install.ensure(python)
    result = replicas_scenario(python, site, tmp_path_factory.mktemp("replicas"))
    report = os.environ.get("KVTIER_ROUTER_REPLICAS_REPORT")
    if report:
        Path(report).write_text(json.dumps(as_json(result), indent=1), encoding="utf-8")
    yield result


def test_both_replicas_served(observed: ReplicasObserved) -> None:
    for strategy, by in observed.runs.items():
        replicas = {s.replica for s in by[2].served}
        assert replicas == {"R1", "R2"}, f"{strategy}: the two-replica run used only {replicas}"


def test_session_rings_agree_across_replicas(observed: ReplicasObserved) -> None:
    """consistent_hash: every session stays on one engine whichever replica routes it, and the sessions use both."""
    run = observed.runs["session"][2]
    engines: dict[str, set[str]] = {}
    for s in run.served:
        engines.setdefault(s.key, set()).add(s.engine)
    moved = {k: v for k, v in engines.items() if len(v) != 1}
    assert not moved, f"sessions moved between engines across the two replicas: {moved}"
    assert {next(iter(v)) for v in engines.values()} == {"A", "B"}, engines


def test_one_router_keeps_each_prefix_on_one_engine(observed: ReplicasObserved) -> None:
    """The baseline the two-replica cost is measured against: one cache_aware router never moves a prefix."""
    assert observed.runs["prefixaware"][1].summary()["moved_share"] == 0, observed.table()


def test_with_two_routers_the_shared_l2_serves_what_the_other_replica_placed(observed: ReplicasObserved) -> None:
    """cache_aware with two replicas: a repeat of a prefix may reach the other engine, yet every whole chunk of its
    prefix comes from some tier (L0 where it stayed, the shared L2 where it moved): no repeat recomputes the prefix."""
    chunk = observed.chunk_tokens
    full = PREFIX_TOKENS // chunk * chunk
    short = [s for s in observed.runs["prefixaware"][2].repeats() if s.cached_tokens < full]
    assert not short, f"repeats that found fewer than {full} cached tokens: {short[:3]} ({observed.table()})"
