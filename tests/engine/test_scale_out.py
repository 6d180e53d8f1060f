"""Elastic endpoints with real engines (issue 27): a scale-out replica is warm from the shared L2 on its first request,
and a scale-in behind kvtier's real router loses no request the router can retry.

Collected only by `make test-engine` (marker `engine`; KVTIER_ENGINE_PYTHON names the engine venv's python). The
scenario (scale_out.py) runs once per module; each test checks one property (scale_out_checks.py).
KVTIER_SCALE_OUT_BREAK=hash-seed|l2-url|chunk-size renders the new replica with that wrong value: the scale-out tests
must fail. KVTIER_DRAIN_BREAK=1 renders the engines without their preStop drain: the scale-in tests must fail (issue
38). KVTIER_SCALE_OUT_REPORT writes what was observed as JSON (with the cold/warm TTFT ratio).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine import router_install, scale_out_checks
from tests.engine.scale_out import ScaleObserved, scale_scenario

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleObserved]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    site = router_install.ensure(python)
    workdir = tmp_path_factory.mktemp("scale")
    result = scale_scenario(python, site, workdir, os.environ.get("KVTIER_SCALE_OUT_BREAK") or None)
    report = os.environ.get("KVTIER_SCALE_OUT_REPORT")
    if report:
        data = dataclasses.asdict(result) | {
            "ratio": result.ratio(),
            "scale_in_summary": scale_out_checks.scale_in_summary(result),
        }
        Path(report).write_text(json.dumps(data, indent=1), encoding="utf-8")
    yield result


def test_new_replica_is_rendered_the_same_l2(observed: ScaleObserved) -> None:
    scale_out_checks.same_rendering(observed)


def test_workload_stored_every_prefix_in_l2(observed: ScaleObserved) -> None:
    scale_out_checks.workload_stored(observed)


def test_new_replica_first_request_is_served_from_l2(observed: ScaleObserved) -> None:
    scale_out_checks.warm_from_l2(observed, "first")


def test_new_replica_hits_every_shared_prefix(observed: ScaleObserved) -> None:
    scale_out_checks.warm_from_l2(observed, "all")


def test_replica_without_the_shared_l2_computes_everything(observed: ScaleObserved) -> None:
    scale_out_checks.cold_computed(observed)


def test_scale_in_is_bounded(observed: ScaleObserved) -> None:
    scale_out_checks.scale_in_bounded(observed)


def test_scale_in_ran_on_a_loaded_machine(observed: ScaleObserved) -> None:
    scale_out_checks.scale_in_under_load(observed)


def test_scale_in_drains_the_replica_before_sigterm(observed: ScaleObserved) -> None:
    scale_out_checks.scale_in_drained_before_sigterm(observed)


def test_scale_in_finishes_the_streams_the_deleted_replica_was_answering(observed: ScaleObserved) -> None:
    scale_out_checks.scale_in_in_flight_finished(observed)


def test_scale_in_loses_no_request_sent_after_the_deletion(observed: ScaleObserved) -> None:
    scale_out_checks.scale_in_no_loss_after_the_deletion(observed)
