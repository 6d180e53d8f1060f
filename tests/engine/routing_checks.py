"""What each routing strategy promises, checked on what the real router did (routing_scenario.RoutingObserved).

- every strategy: the router's probe paths that kvtier renders answer 200 in front of real engines;
- `roundrobin`: consecutive sequential requests alternate between the two engines; the concurrent chat splits evenly;
- `session`: every session's requests reach one engine, and the sessions use both;
- `prefixaware`: every round of a prefix reaches the engine of its first round, and each later request (prefix and
  chat) finds at least its shared tokens' whole blocks cached;
- `poolaware` (cache_aware with the plan's knobs): the concurrent chat's first turns, which share only the system
  prompt, spread over both engines (a match below the derived cache threshold goes to the least loaded), and every
  later turn finds its blocks in its engine's own cache; with the router's defaults (KVTIER_ROUTER_BREAK=knobs) the
  shared system prompt pulls every user onto one engine;
- every strategy: `kvtier bench --router-metrics-url` names the engine that served each request (one at a time);
  in round robin they alternate, in session routing each user keeps one;
- every strategy, with the shared L2: each later request finds at least its shared tokens' whole LMCache chunks
  cached, wherever it lands; and prefixaware keeps at least as many hits in L0 as roundrobin.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tests.engine.routing_scenario import RoutingObserved, Sent, StrategyRun


def _run(observed: RoutingObserved, strategy: str) -> StrategyRun:
    run = observed.runs.get(strategy)
    assert run is not None, f"the scenario ran no {strategy} router"
    return run


def engines_by_key(sent: list[Sent]) -> dict[str, list[str | None]]:
    by_key: dict[str, list[str | None]] = defaultdict(list)
    for s in sorted(sent, key=lambda s: s.round):
        by_key[s.key].append(s.engine)
    return dict(by_key)


def probes_answer(observed: RoutingObserved, strategy: str) -> None:
    run = _run(observed, strategy)
    assert run.probes and set(run.probes.values()) == {200}, f"{strategy}: router probe paths answered {run.probes}"


def round_robin_alternates(observed: RoutingObserved) -> None:
    run = _run(observed, "roundrobin")
    served = [s.engine for s in [*run.prefix, *run.session]]
    repeats = [i for i in range(1, len(served)) if served[i] == served[i - 1]]
    assert not repeats, f"roundrobin ({run.policy}): consecutive requests on one engine at {repeats}: {served}"
    counts = set(run.chat_per_engine.values())
    assert len(counts) == 1, f"roundrobin ({run.policy}): concurrent chat split {run.chat_per_engine}, not evenly"


def sessions_stick(observed: RoutingObserved) -> None:
    run = _run(observed, "session")
    by_session = engines_by_key(run.session)
    moved = {k: v for k, v in by_session.items() if len(set(v)) != 1}
    assert not moved, f"session ({run.policy}): sessions moved between engines: {moved}"
    used = {v[0] for v in by_session.values()}
    assert len(used) == len(observed.engines), f"session ({run.policy}): every session on {used}; none spread"


def prefix_stays(observed: RoutingObserved) -> None:
    run = _run(observed, "prefixaware")
    moved = {k: v for k, v in engines_by_key(run.prefix).items() if len(set(v)) != 1}
    assert not moved, f"prefixaware ({run.policy}): prefixes moved between engines: {moved}"


def pool_spreads(observed: RoutingObserved) -> None:
    """Pool-aware routing spreads what only a short shared prefix ties together: both engines serve part of the
    concurrent chat. A user's first turn matches the other users' system prompt for about 37% of its characters:
    above the router's default threshold (0.3), so with prefixaware's knobs every user follows the first one to one
    engine; below the plan's (0.761), so poolaware sends it to the least-loaded engine. How evenly depends on which
    requests are still in flight when the next arrives (4/20 to 12/12 seen), so the check is that neither engine is
    left out; later turns stick to the user's engine (their own history matches)."""
    run = _run(observed, "poolaware")
    total = sum(run.chat_per_engine.values())
    fewest = min(run.chat_per_engine.values())
    assert total and fewest > 0, (
        f"poolaware ({' '.join(run.args[run.args.index('--policy') :][:10])}): the concurrent chat went "
        f"{run.chat_per_engine}; both engines should serve part of it"
    )


def whole_units(tokens: int, unit: int) -> int:
    return tokens // unit * unit


def short_hits(sent: list[Sent], unit: int) -> list[dict[str, Any]]:
    """Later requests that found fewer cached tokens than their shared tokens' whole `unit`s."""
    return [
        {"key": s.key, "round": s.round, "cached": s.cached_tokens, "expected": whole_units(s.shared_tokens, unit)}
        for s in sent
        if s.shared_tokens and s.cached_tokens < whole_units(s.shared_tokens, unit)
    ]


def local_hits(observed: RoutingObserved, strategy: str) -> None:
    """The strategy keeps each key on the engine that holds it: whole vLLM blocks of the shared tokens hit."""
    run = _run(observed, strategy)
    workloads = {"prefixaware": [*run.prefix, *run.chat], "session": run.chat, "poolaware": run.chat}[strategy]
    short = short_hits(workloads, observed.block_tokens)
    assert not short, f"{strategy} ({run.policy}): requests missed blocks their engine held: {short}"


def pool_hits(observed: RoutingObserved, strategy: str) -> None:
    """Wherever a request lands, the shared L2 gives it every whole chunk an earlier request stored."""
    run = _run(observed, strategy)
    short = short_hits([*run.prefix, *run.chat], observed.chunk_tokens)
    assert not short, f"{strategy} ({run.policy}): requests missed chunks the shared L2 held: {short}"


def prefix_keeps_l0(observed: RoutingObserved) -> None:
    prefix, rr = _run(observed, "prefixaware"), _run(observed, "roundrobin")
    assert prefix.chat_tiers["l0"] >= rr.chat_tiers["l0"], (
        f"prefixaware kept {prefix.chat_tiers['l0']:.0f} L0 hit tokens, roundrobin {rr.chat_tiers['l0']:.0f}"
    )


def bench_names_replicas(observed: RoutingObserved, strategy: str) -> None:
    run = _run(observed, strategy)
    workers = set(observed.engine_urls.values())
    named = [r.get("replica") for r in run.bench]
    assert run.bench and all(name in workers for name in named), (
        f"{strategy}: kvtier bench named replicas {named}; the engines are {sorted(workers)}"
    )
    if strategy == "roundrobin":
        repeats = [i for i in range(1, len(named)) if named[i] == named[i - 1]]
        assert not repeats, f"roundrobin: kvtier bench saw consecutive requests on one replica: {named}"
    if strategy == "session":
        by_user: dict[str, set[str | None]] = defaultdict(set)
        for r in run.bench:
            by_user[str(r["tags"].get("user"))].add(r.get("replica"))
        moved = {u: v for u, v in by_user.items() if len(v) != 1}
        assert not moved, f"session: kvtier bench saw users on several replicas: {moved}"
