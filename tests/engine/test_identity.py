"""`cache_salt` and LoRA adapters on a shared L2, with real engines (issues 34 and 35; identity_scenario.py).

The `engine` tests run the scenario once per module (`make test-engine`): one reference engine without any cache, then
one engine pair per connector started once with LoRA on, the salt and adapter checks as phases on each pair. The
other tests run in `make test`: the break switches change what they should, and each check fails on what a broken
engine showed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvtier.connectors.plugins.kvtier_lmcache import ADAPTER_BREAK, SALT_BREAK
from kvtier.k8s.adapters import PATH_BREAK
from kvtier.rules import load_checked
from kvtier.versions import ROUTER_POLICY
from tests.engine import adapter_routing, render, router_install
from tests.engine import identity_checks as checks
from tests.engine.identity_scenario import (
    ADAPTER_VERSION,
    ADAPTERS,
    BASE,
    BREAK_SWITCHES,
    CONNECTORS,
    REFERENCES,
    STEPS,
    Answer,
    IdentityObserved,
    PairRun,
    Setup,
    adapter_endpoint,
    adapter_path,
    identity_scenario,
    reference_key,
    to_json,
    without_cache,
)
from tests.engine.scenario import ENV_NAME, LOB, REPO

SHARED = {"salt": ("x_on_1", "x_on_2"), "adapter": ("a_on_1", "a_on_2")}
ISOLATED = ("y_on_2", "unsalted_on_2", "b_on_2", "base_on_2", "a_after_base_on_2")


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IdentityObserved]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    result = identity_scenario(python, tmp_path_factory.mktemp("identity"), router_install.ensure(python))
    report = os.environ.get("KVTIER_ENGINE_IDENTITY_REPORT")
    if report:
        Path(report).write_text(to_json(result), encoding="utf-8")
    phases = {c: run.timings_s for c, run in result.pairs.items()}
    print(f"\nidentity scenario: {result.timings_s} phases {phases} breaks {result.breaks or 'none'}")
    yield result


@pytest.mark.engine
def test_the_adapters_change_the_greedy_tokens_without_any_cache(observed: IdentityObserved) -> None:
    checks.adapters_change_the_output(observed)


@pytest.mark.engine
def test_a_missing_adapter_stops_the_engine_with_one_line(observed: IdentityObserved) -> None:
    checks.a_missing_adapter_stops_the_engine(observed)


@pytest.mark.engine
def test_vllm_exports_the_adapters_each_replica_runs(observed: IdentityObserved) -> None:
    checks.lora_info_names_the_adapters(observed)


@pytest.mark.engine
@pytest.mark.parametrize("connector", CONNECTORS)
@pytest.mark.parametrize("phase", sorted(SHARED))
def test_one_identity_shares_the_l2_across_replicas(observed: IdentityObserved, connector: str, phase: str) -> None:
    """Salt X (adapter A) on engine 1, cold; then on engine 2: every full file from L2."""
    writer, reader = SHARED[phase]
    run = observed.pairs[connector]
    checks.writer_cold(run, writer)
    checks.l2_hit(run, reader, observed)


@pytest.mark.engine
@pytest.mark.parametrize("connector", CONNECTORS)
@pytest.mark.parametrize("step", ISOLATED)
def test_another_identity_hits_nothing_and_answers_as_without_cache(
    observed: IdentityObserved, connector: str, step: str
) -> None:
    """Salt Y, no salt, adapter B, the base model after A, and A after the base model: 0 hit tokens on every tier,
    the greedy tokens of the run without any cache."""
    run = observed.pairs[connector]
    if step == "a_after_base_on_2":
        checks.writer_cold(run, "base_on_1")
    checks.isolated(run, step, observed)


@pytest.mark.engine
@pytest.mark.parametrize("strategy", list(ROUTER_POLICY))
def test_mixed_adapter_traffic_through_the_router_finds_only_its_own_kv(
    observed: IdentityObserved, strategy: str
) -> None:
    assert observed.routing is not None, "the router phase did not run"
    chunk = observed.pairs["lmcache"].unit_tokens
    adapter_routing.own_prefix_everywhere(observed.routing, strategy, chunk)


# --- without an engine (make test) ---


def _answer(engine: str, model: str, salt: str | None, hit: int, tokens: list[int], **kw: Any) -> Answer:
    return Answer(engine, model, salt, 1000, hit, tokens, 0.0, float(hit), **kw)


REF = {"salt/base": [1860, 390, 1736, 370], "adapter/alpha": [395, 20, 1332, 261], "adapter/beta": [895, 1480, 772]}


def _observed(connector: str, answers: dict[str, Answer], reads: float = 786432.0) -> IdentityObserved:
    unit, full = (256, 768) if connector == "lmcache" else (32, 992)
    run = PairRun(connector, unit, full, answers, {"salt": reads, "adapter": reads})
    return IdentityObserved(references=dict(REF), pairs={connector: run})


def test_the_checks_pass_on_what_good_engines_showed() -> None:
    """Numbers of the first real run (LMCache pair): X and A hit 768 tokens (3 chunks) on engine 2, Y and B none."""
    files = [f"llama31-8b/x/c{i}@bfloat16.data" for i in range(3)]
    good = _observed(
        "lmcache",
        {
            "x_on_1": _answer("L1", "base", "x", 0, REF["salt/base"], lmcache_hit_tokens=[0], new_l2_files=files),
            "x_on_2": _answer("L2", "base", "x", 768, REF["salt/base"], lmcache_hit_tokens=[768]),
            "y_on_2": _answer("L2", "base", "y", 0, REF["salt/base"], lmcache_hit_tokens=[0]),
            "a_on_2": _answer("L2", "alpha", None, 768, REF["adapter/alpha"], lmcache_hit_tokens=[768]),
            "b_on_2": _answer("L2", "beta", None, 0, REF["adapter/beta"], lmcache_hit_tokens=[0]),
        },
    )
    run = good.pairs["lmcache"]
    checks.writer_cold(run, "x_on_1")
    for name in ("x_on_2", "a_on_2"):
        checks.l2_hit(run, name, good)
    for name in ("y_on_2", "b_on_2"):
        checks.isolated(run, name, good)


def test_the_checks_fail_on_what_broken_engines_show() -> None:
    """A salt leak (LMCache without the salt tag: Y loads X's 3 chunks, same tokens), B served A's KV (other tokens),
    and A missing on engine 2 (vLLM's connector, per-replica adapter path: no fs hit, no L2 bytes)."""
    leak = _observed("lmcache", {"y_on_2": _answer("L2", "base", "y", 768, REF["salt/base"], lmcache_hit_tokens=[768])})
    with pytest.raises(AssertionError, match="took another identity's KV"):
        checks.isolated(leak.pairs["lmcache"], "y_on_2", leak)
    wrong = _observed("lmcache", {"b_on_2": _answer("L2", "beta", None, 768, [9, 9, 9], lmcache_hit_tokens=[768])})
    with pytest.raises(AssertionError, match="took another identity's KV"):
        checks.isolated(wrong.pairs["lmcache"], "b_on_2", wrong)
    quiet = _observed("lmcache", {"b_on_2": _answer("L2", "beta", None, 0, [9, 9, 9], lmcache_hit_tokens=[0])})
    with pytest.raises(AssertionError, match="the run without any cache"):
        checks.isolated(quiet.pairs["lmcache"], "b_on_2", quiet)
    miss = _observed(
        "vllm", {"a_on_2": _answer("V2", "alpha", None, 0, REF["adapter/alpha"], tier_chunk_hits={"L2": 0.0})}, 0.0
    )
    with pytest.raises(AssertionError, match="expected an L2 hit"):
        checks.l2_hit(miss.pairs["vllm"], "a_on_2", miss)
    same = IdentityObserved(references={f"adapter/{m}": [1, 2, 3, 4, 5, 6, 7, 8] for m in ("base", "alpha", "beta")})
    with pytest.raises(AssertionError, match="do not change the model"):
        checks.adapters_change_the_output(same)


def _prepared(tmp_path: Path, key: str, connector: str) -> str:
    config = load_checked(REPO / "config", ENV_NAME)
    for name in ADAPTERS:
        (tmp_path / "adapters-built" / name).mkdir(parents=True, exist_ok=True)
    endpoints = {c: adapter_endpoint(config, c) for c in CONNECTORS}
    roots = {c: tmp_path / f"l2-{c}" for c in CONNECTORS}
    setup = Setup(tmp_path, config, endpoints, tmp_path / "model", tmp_path / "adapters-built", roots)
    _, launch = setup.prepare(key, connector)
    return adapter_path(launch, ADAPTERS[0])


@pytest.mark.parametrize("connector", CONNECTORS)
def test_replicas_load_an_adapter_from_one_path_unless_the_path_break_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, connector: str
) -> None:
    one, two = _prepared(tmp_path, "E1", connector), _prepared(tmp_path, "E2", connector)
    assert one == two and one.endswith(f"/adapters/{ADAPTERS[0]}/{ADAPTER_VERSION}"), (one, two)
    assert Path(one).is_dir()  # the fetch init container's copy
    monkeypatch.setenv(PATH_BREAK, "1")
    one, two = _prepared(tmp_path, "E1", connector), _prepared(tmp_path, "E2", connector)
    assert one != two and "llama31-8b-engine-e1" in one and "llama31-8b-engine-e2" in two, (one, two)


def test_the_lmcache_break_switches_reach_the_engines_unchanged() -> None:
    """The engine's environment is the test's (engines.py drops only LMCACHE_* and VLLM_*), and kvtier renders neither
    switch, so `KVTIER_SALT_BREAK=1 make test-engine` reaches kvtier's connector in the engine."""
    config = load_checked(REPO / "config", ENV_NAME)
    rendered = render.standalone(config, LOB, adapter_endpoint(config, "lmcache"))
    assert not {SALT_BREAK, ADAPTER_BREAK} & set(rendered.env)
    assert not any(s.startswith(("LMCACHE_", "VLLM_")) for s in BREAK_SWITCHES)


def test_the_reference_engine_has_no_cache_at_all(tmp_path: Path) -> None:
    launch = render.Launch("R", ("--model", "m", "--kv-transfer-config", "{}", "--enable-lora"), {}, {}, tmp_path)
    bare = without_cache(launch)
    assert "--kv-transfer-config" not in bare.args and "--no-enable-prefix-caching" in bare.args
    assert bare.l2_dir is None


def test_the_references_cover_every_step() -> None:
    assert {reference_key(s.prompt, s.model) for s in STEPS} <= set(REFERENCES)
    assert {reference_key("adapter", m) for m in (BASE, *ADAPTERS)} <= set(REFERENCES)


def test_the_missing_adapter_check_passes_on_what_m_showed_and_fails_on_a_silent_start() -> None:
    """M's numbers from a real run: it stopped (exit 1), verify's line names the adapter, the check stopped on M's
    folder and passed the real adapters. An engine that stopped without an error, another line, or a check that passes what it should stop fails it."""
    missing = (
        "kvtier: adapter beta: no adapter_config.json in /w/adapters-empty/beta/2026-12-01, fetched from "
        "s3://kvtier-test-adapters/tiny/beta/ (weights_version 2026-12-01): nothing, or not a PEFT adapter, is there; "
        "check the source and its pinned version"
    )
    good = {
        "exit_code": 1,
        "verify_line": "ValueError: Loading lora beta failed: No adapter found for <path>",
        "check_missing": {"exit_code": 1, "stdout": "", "stderr": missing},
        "check_real": {"exit_code": 0, "stdout": "kvtier: adapters ready: alpha, beta", "stderr": ""},
    }
    checks.a_missing_adapter_stops_the_engine(IdentityObserved(missing_adapter=good))
    for bad in (
        good | {"exit_code": 0},
        good | {"verify_line": "RuntimeError: something else"},
        good | {"check_missing": {"exit_code": 0, "stdout": "kvtier: adapters ready: alpha, beta", "stderr": ""}},
        good | {"check_real": {"exit_code": 1, "stdout": "", "stderr": missing}},
    ):
        with pytest.raises(AssertionError):
            checks.a_missing_adapter_stops_the_engine(IdentityObserved(missing_adapter=bad))
