"""The identity scenario's assertions (identity_scenario.py), as plain functions of what it observed, so that
tests/engine/test_identity.py can also run them on what good and broken engines showed, without an engine.

A hit is read on every tier a request could take another identity's KV from: L0 (vLLM's prefix cache counter),
L1 + L2 through the connector (vLLM's external-hit counter and `cached_tokens`), and the connector's own count:
LMCache's lookup over its L1 and L2, or vLLM's per-tier chunk hits.
"""

from __future__ import annotations

import re
from itertools import combinations

from kvtier.k8s.observability.metrics import LORA_RUNNING, LORA_WAITING
from tests.engine.identity_scenario import (
    ADAPTER_VERSION,
    ADAPTERS,
    ANSWER_TOKENS,
    BASE,
    STEPS,
    Answer,
    IdentityObserved,
    PairRun,
    reference_key,
)

STEP = {s.name: s for s in STEPS}


def describe(name: str, r: Answer) -> str:
    connector = (
        f"LMCache hit tokens {r.lmcache_hit_tokens}"
        if r.lmcache_hit_tokens
        else f"chunk hits { ({k: round(v) for k, v in sorted(r.tier_chunk_hits.items())}) }"
    )
    salt = f", salt {r.salt}" if r.salt else ""
    return (
        f"{name} ({r.engine}, model {r.model}{salt}): prompt {r.prompt_tokens}, L0 hits +{r.l0_hit_tokens:g}, "
        f"connector (L1+L2) hits +{r.external_hit_tokens:g}, {connector}, cached_tokens {r.cached_tokens}, "
        f"tokens {r.token_ids}"
    )


def adapters_change_the_output(observed: IdentityObserved) -> None:
    """Without any cache, the base model, A and B answer the adapter prompt with different greedy tokens (an adapter
    PEFT left at zero would answer like the base model, and the isolation checks would prove nothing)."""
    answers = {m: observed.references.get(reference_key("adapter", m), []) for m in (BASE, *ADAPTERS)}
    for model, tokens in answers.items():
        assert len(tokens) == ANSWER_TOKENS, f"the run without cache gave {model} {len(tokens)} tokens: {tokens}"
    for one, other in combinations(answers, 2):
        assert answers[one] != answers[other], (
            f"{one} and {other} give the same greedy tokens without any cache ({answers[one]}): the adapters do not "
            "change the model"
        )


def writer_cold(run: PairRun, name: str) -> None:
    """The first request of its identity on the shared L2 hit nothing and wrote every full file of its prompt."""
    r = run.answers[name]
    assert r.l0_hit_tokens == 0 and r.external_hit_tokens == 0 and r.cached_tokens == 0, (
        f"{run.connector}: the writer was not cold: {describe(name, r)}"
    )
    suffix = ".data" if run.connector == "lmcache" else ".bin"
    files = [f for f in r.new_l2_files if f.endswith(suffix)]
    assert len(files) >= run.full_tokens // run.unit_tokens, (
        f"{run.connector}: {name} wrote {len(files)} L2 files, not one per full {run.unit_tokens}-token unit of the "
        f"prompt ({run.full_tokens // run.unit_tokens}): {files[:3]}"
    )


def l2_hit(run: PairRun, name: str, observed: IdentityObserved) -> None:
    """Engine 2's first request of an identity engine 1 wrote loaded every full file from L2 (engine 2 never computed
    those tokens, so nothing but L2 could hold them), nothing from L0, and answered as the run without any cache
    (the KV it loaded is its own identity's)."""
    r, full = run.answers[name], run.full_tokens
    phase = STEP[name].phase
    assert r.l0_hit_tokens == 0, f"{run.connector}: L0 served it, not L2: {describe(name, r)}"
    assert r.external_hit_tokens == full and r.cached_tokens == full, (
        f"{run.connector}: expected an L2 hit of all {full} tokens of the full files engine 1 wrote: {describe(name, r)}"
    )
    if run.connector == "lmcache":
        assert r.lmcache_hit_tokens == [full], f"lmcache: expected LMCache hit tokens [{full}]: {describe(name, r)}"
    else:
        assert r.tier_chunk_hits.get("L2", 0) > 0, f"vllm: no chunk hit on the fs tier: {describe(name, r)}"
    assert run.l2_read_bytes.get(phase, 0) > 0, (
        f"{run.connector}: engine 2 read no L2 bytes in the {phase} phase ({run.l2_read_bytes})"
    )
    step = STEP[name]
    expected = observed.references[reference_key(step.prompt, step.model)]
    assert r.token_ids == expected, (
        f"{run.connector}: {name} answered {r.token_ids} from the L2's KV, the run without any cache {expected}: "
        f"{describe(name, r)}"
    )


def isolated(run: PairRun, name: str, observed: IdentityObserved) -> None:
    """0 hit tokens on L0, L1 and L2 from the other identity's KV (which engine 2 holds on every tier by then), and
    the greedy tokens of a run without any cache."""
    r = run.answers[name]
    step = STEP[name]
    hits = {
        "L0": r.l0_hit_tokens,
        "L1+L2 (vLLM's connector counter)": r.external_hit_tokens,
        "cached_tokens": float(r.cached_tokens),
        **{f"{tier} chunks": n for tier, n in r.tier_chunk_hits.items()},
        "LMCache (L1+L2)": float(sum(r.lmcache_hit_tokens)),
    }
    leaked = {tier: n for tier, n in hits.items() if n}
    expected = observed.references[reference_key(step.prompt, step.model)]
    assert not leaked, (
        f"{run.connector}: {name} took another identity's KV ({leaked}): {describe(name, r)}; without any cache: "
        f"{expected}"
    )
    if run.connector == "lmcache":
        assert r.lmcache_hit_tokens, f"lmcache: no LMCache lookup line for {name}: {describe(name, r)}"
    assert r.token_ids == expected, (
        f"{run.connector}: {name} answered {r.token_ids}, the run without any cache {expected}: {describe(name, r)}"
    )


def lora_info_names_the_adapters(observed: IdentityObserved) -> None:
    """What the per-adapter rules read (kvtier/k8s/observability/rules.py `adapter_records`), as the real engines
    export it: `vllm:lora_requests_info` series whose running and waiting labels list the adapters each engine
    served, comma-joined, with a Unix time as the value."""
    served = {"L1": {ADAPTERS[0]}, "L2": set(ADAPTERS)}  # engine 1 served A; engine 2 served A and B
    for engine, names in served.items():
        lines = observed.lora_series.get(engine, [])
        seen: set[str] = set()
        for line in lines:
            labels, value = line.rsplit(" ", 1)
            assert float(value) > 1.6e9, f"{engine}: {line} is not a Unix time"
            match = re.search(rf'{LORA_RUNNING}="([^"]*)"', labels)
            assert match and f'{LORA_WAITING}="' in labels, f"{engine}: {line} lacks the labels the rules read"
            seen |= set(filter(None, match.group(1).split(",")))
        assert seen == names, (
            f"{engine}: vllm:lora_requests_info named {sorted(seen)} running, expected {sorted(names)}"
        )


def a_missing_adapter_stops_the_engine(observed: IdentityObserved) -> None:
    """Engine M (adapter B's folder empty) stops at start-up instead of serving; the line `kvtier verify` reads from
    its last log lines names B (vLLM 0.32 writes `<path>` for the path there); kvtier's adapter check, run before
    vLLM in the pod, stops on the same folder with its own one line naming the folder, and passes the real
    adapters."""
    m = observed.missing_adapter
    b = ADAPTERS[1]
    assert m and m["exit_code"] != 0, f"M did not stop with adapter {b} missing: {m}"
    line = m["verify_line"]
    assert f"Loading lora {b} failed" in line, f"verify would show {line!r}, not that adapter {b} failed to load"
    missing, real = m["check_missing"], m["check_real"]
    lines = missing["stderr"].splitlines()
    assert missing["exit_code"] == 1 and len(lines) == 1, f"the adapter check on M's folder: {missing}"
    assert lines[0].startswith(f"kvtier: adapter {b}: no adapter_config.json in ") and f"/{ADAPTER_VERSION}" in lines[0]
    assert real["exit_code"] == 0 and real["stdout"] == f"kvtier: adapters ready: {', '.join(ADAPTERS)}", real
