"""Real vLLM (CPU build) + real LMCache engines with the settings kvtier renders: cross-replica L2 hits and misses.

Collected only by `make test-engine` (marker `engine`): it needs the engine venv, whose python KVTIER_ENGINE_PYTHON
names. The scenario (scenario.py) runs once per session, as a phase on the engines the session shares
(lmcache_replicas.py); each test below checks one property of what it observed (checks.py). What this proves and
what it does not: docs/development.md, "Real engines on CPU".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine import checks
from tests.engine.lmcache_replicas import Replicas
from tests.engine.report import write as write_section
from tests.engine.scenario import Observed, scenario
from tests.engine.shared_groups import SharedGroup

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def observed(shared_replicas: SharedGroup[Replicas]) -> Iterator[Observed]:
    replicas_only = os.environ.get("KVTIER_ENGINE_SCOPE") == "replicas"
    result = scenario(shared_replicas.get(), replicas_only=replicas_only)
    report = os.environ.get("KVTIER_ENGINE_REPORT")
    if report:
        Path(report).write_text(json.dumps(checks.as_json(result), indent=2, sort_keys=True), encoding="utf-8")
    bench_doc = os.environ.get("KVTIER_ENGINE_BENCH_DOC")
    if bench_doc:
        write_section(Path(bench_doc), result)
    yield result


def test_replica_hits_every_full_chunk(observed: Observed) -> None:
    checks.cross_replica_hit(observed, "B")


def test_operator_pod_hits_every_full_chunk(observed: Observed) -> None:
    checks.cross_replica_hit(observed, "E")


def test_writer_stored_full_chunks_in_the_rendered_directory(observed: Observed) -> None:
    checks.writer_stored(observed)


def test_other_hash_seed_misses(observed: Observed) -> None:
    checks.no_hit(observed, "C")


def test_other_model_identity_misses(observed: Observed) -> None:
    checks.other_identity(observed)


def test_verify_probe_proves_the_cross_replica_hit(observed: Observed) -> None:
    checks.probe_hit(observed)


def test_verify_probe_explains_the_other_seed_miss(observed: Observed) -> None:
    checks.probe_miss_explained(observed)


def test_janitor_over_the_real_directory(observed: Observed) -> None:
    checks.janitor(observed)


def test_bench_sweep_counts_external_hits(observed: Observed) -> None:
    checks.bench(observed)
