"""The real-router harness without engines (fast, in `make test`): the router flags it takes from kvtier, the wrong
policy it can inject, its checks on the observations a wrong router produces, and its pin."""

from __future__ import annotations

import dataclasses

import pytest

from kvtier.k8s.endpoint_names import ENGINE_PORT
from kvtier.versions import ROUTER_POLICY, VLLM_ROUTER_VERSION
from tests.engine import router_install, routing_checks
from tests.engine.routers import BROKEN_POLICY, localize
from tests.engine.routing_scenario import RoutingObserved, Sent, StrategyRun, rendered_router_args

WORKERS = ["http://127.0.0.1:1001", "http://127.0.0.1:1002"]


def _flags(args: list[str]) -> dict[str, str]:
    return {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag.startswith("--")}


@pytest.mark.parametrize("strategy", list(ROUTER_POLICY))
def test_router_flags_are_kvtiers_own(strategy: str) -> None:
    """Only discovery and the listening addresses change; the policy and every other flag pass through."""
    rendered = rendered_router_args(strategy, None)
    local = localize(rendered, WORKERS, 2001, 2002)
    assert _flags(local)["--policy"] == ROUTER_POLICY[strategy]
    assert local[local.index("--worker-urls") + 1 : local.index("--worker-urls") + 3] == WORKERS
    for gone in ("--service-discovery", "--selector", "--service-discovery-port", "--service-discovery-namespace"):
        assert gone in rendered and gone not in local
    assert not any(a.startswith("kvtier.io/") for a in local) and str(ENGINE_PORT) not in local
    changed = {"--host", "--port", "--prometheus-host", "--prometheus-port", "--service-discovery", "--selector"}
    kept = {k: v for k, v in _flags(rendered).items() if k not in changed and not k.startswith("--service-discovery")}
    assert kept.items() <= _flags(local).items()
    assert (_flags(local)["--port"], _flags(local)["--prometheus-port"]) == ("2001", "2002")


@pytest.mark.parametrize("strategy", list(ROUTER_POLICY))
def test_a_broken_policy_reaches_the_router(strategy: str) -> None:
    broken = localize(rendered_router_args(strategy, "policy"), WORKERS, 2001, 2002)
    assert _flags(broken)["--policy"] == BROKEN_POLICY[strategy] != ROUTER_POLICY[strategy]
    assert _flags(rendered_router_args(strategy, None))["--policy"] == ROUTER_POLICY[strategy]  # restored


def test_unknown_break_is_one_line() -> None:
    with pytest.raises(ValueError, match="use one of policy, knobs"):
        rendered_router_args("session", "flag")


def test_router_pin_is_the_deployed_version() -> None:
    pins = router_install.pins(router_install.LOCK.read_text(encoding="utf-8"))
    assert pins["vllm-router"] == VLLM_ROUTER_VERSION


def _sent(key: str, rnd: int, engine: str, cached: int = 0, shared: int = 0) -> Sent:
    return Sent(key, rnd, 700, cached, 1.0, shared, engine)


def _good() -> RoutingObserved:
    """What the real router showed (shape of a passing run): the checks accept it."""
    rr_seq = [_sent(f"p{i % 3}", i // 3, "AB"[i % 2], 512 if i >= 3 else 0, 600 if i >= 3 else 0) for i in range(12)]
    runs = {
        "roundrobin": StrategyRun("roundrobin", "round_robin", [], prefix=rr_seq, chat_per_engine={"A": 12, "B": 12}),
        "session": StrategyRun(
            "session",
            "consistent_hash",
            [],
            session=[_sent(f"s{i}", r, "AAB"[i % 3]) for r in range(3) for i in range(5)],
        ),
        "prefixaware": StrategyRun(
            "prefixaware",
            "cache_aware",
            [],
            prefix=[_sent(f"p{i}", r, "A", 576 if r else 0, 600 if r else 0) for r in range(4) for i in range(3)],
        ),
        "poolaware": StrategyRun(
            "poolaware",
            "cache_aware",
            rendered_router_args("poolaware", None),
            chat=[Sent(f"u{i}", r, 700, 640 if r else 0, 1.0, 640 if r else 0) for r in range(4) for i in range(6)],
            chat_per_engine={"A": 12, "B": 12},
        ),
    }
    urls = {"A": "http://127.0.0.1:1001", "B": "http://127.0.0.1:1002"}
    runs["roundrobin"].bench = [{"replica": urls["AB"[i % 2]], "tags": {"user": i % 3}} for i in range(6)]
    runs["session"].bench = [{"replica": urls["AB"[i % 3 == 2]], "tags": {"user": i % 3}} for i in range(6)]
    runs["prefixaware"].bench = [{"replica": urls["B"], "tags": {"user": i % 3}} for i in range(6)]
    runs["poolaware"].bench = [{"replica": urls["AB"[i % 3 == 2]], "tags": {"user": i % 3}} for i in range(6)]
    for run in runs.values():
        run.probes = {"/readiness": 200, "/liveness": 200}
        run.chat_tiers = {"l0": 100.0 if run.strategy != "roundrobin" else 90.0, "external": 0.0, "prompt": 200.0}
    return RoutingObserved(runs=runs, engine_urls=urls, block_tokens=32, chunk_tokens=256)


def test_checks_accept_what_a_working_router_shows() -> None:
    observed = _good()
    for strategy in ROUTER_POLICY:
        routing_checks.probes_answer(observed, strategy)
        routing_checks.pool_hits(observed, strategy)
        routing_checks.bench_names_replicas(observed, strategy)
    routing_checks.round_robin_alternates(observed)
    routing_checks.sessions_stick(observed)
    routing_checks.prefix_stays(observed)
    routing_checks.local_hits(observed, "prefixaware")
    routing_checks.prefix_keeps_l0(observed)
    routing_checks.local_hits(observed, "poolaware")
    routing_checks.pool_spreads(observed)


def test_poolaware_renders_the_plans_knobs_and_a_break_renders_the_routers_defaults() -> None:
    rendered = _flags(rendered_router_args("poolaware", None))
    knobs = {k: rendered[k] for k in ("--cache-threshold", "--balance-abs-threshold", "--balance-rel-threshold")}
    assert knobs != {"--cache-threshold": "0.3", "--balance-abs-threshold": "64", "--balance-rel-threshold": "1.5"}
    broken = _flags(rendered_router_args("poolaware", "knobs"))
    assert broken["--cache-threshold"] == "0.3" and broken["--balance-abs-threshold"] == "64"
    assert broken["--balance-rel-threshold"] == "1.5" and broken["--policy"] == "cache_aware"
    for strategy in ("prefixaware", "session", "roundrobin"):  # only poolaware has knobs to break
        assert rendered_router_args(strategy, "knobs") == rendered_router_args(strategy, None)


def test_checks_fail_when_poolaware_keeps_everyone_on_one_engine() -> None:
    """What the router's defaults show on the chat: the shared system prompt pulls all 24 turns onto one engine."""
    observed = _good()
    observed.runs["poolaware"].chat_per_engine = {"A": 0, "B": 24}
    with pytest.raises(AssertionError, match="both engines should serve part of it"):
        routing_checks.pool_spreads(observed)
    observed.runs["poolaware"].chat_per_engine = {"A": 4, "B": 20}  # one user of six on A: uneven, still spread
    routing_checks.pool_spreads(observed)


def test_checks_fail_on_what_a_wrong_policy_shows() -> None:
    """The observations of the broken policies (round_robin for prefixaware and session, cache_aware for roundrobin)."""
    good = _good()
    wrong = dataclasses.replace(good, runs=dict(good.runs))
    wrong.runs["roundrobin"] = dataclasses.replace(
        good.runs["roundrobin"], prefix=[dataclasses.replace(s, engine="A") for s in good.runs["roundrobin"].prefix]
    )
    wrong.runs["session"] = dataclasses.replace(
        good.runs["session"], session=[_sent(f"s{i}", r, "AB"[(r * 5 + i) % 2]) for r in range(3) for i in range(5)]
    )
    wrong.runs["prefixaware"] = dataclasses.replace(
        good.runs["prefixaware"],
        prefix=good.runs["roundrobin"].prefix,  # alternating engines
    )
    with pytest.raises(AssertionError, match="consecutive requests on one engine"):
        routing_checks.round_robin_alternates(wrong)
    with pytest.raises(AssertionError, match="sessions moved"):
        routing_checks.sessions_stick(wrong)
    with pytest.raises(AssertionError, match="prefixes moved"):
        routing_checks.prefix_stays(wrong)
    with pytest.raises(AssertionError, match="missed blocks"):
        routing_checks.local_hits(wrong, "prefixaware")


def test_checks_fail_when_the_l2_does_not_serve_a_moved_request() -> None:
    observed = _good()
    observed.runs["roundrobin"].prefix[5] = _sent("p2", 1, "B", cached=0, shared=600)
    with pytest.raises(AssertionError, match="missed chunks the shared L2 held"):
        routing_checks.pool_hits(observed, "roundrobin")


def test_checks_fail_when_a_probe_path_does_not_answer() -> None:
    observed = _good()
    observed.runs["session"].probes = {"/readiness": 200, "/liveness": 404}
    with pytest.raises(AssertionError, match="probe paths"):
        routing_checks.probes_answer(observed, "session")


def test_checks_fail_when_the_bench_cannot_name_or_misnames_replicas() -> None:
    observed = _good()
    observed.runs["prefixaware"].bench[2]["replica"] = None
    with pytest.raises(AssertionError, match="named replicas"):
        routing_checks.bench_names_replicas(observed, "prefixaware")
    observed.runs["roundrobin"].bench[1]["replica"] = observed.runs["roundrobin"].bench[0]["replica"]
    with pytest.raises(AssertionError, match="consecutive requests on one replica"):
        routing_checks.bench_names_replicas(observed, "roundrobin")
    observed.runs["session"].bench[3]["replica"] = "http://127.0.0.1:1002"  # user 0 on both
    with pytest.raises(AssertionError, match="users on several replicas"):
        routing_checks.bench_names_replicas(observed, "session")
