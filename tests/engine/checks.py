"""The real-engine test's assertions, as plain functions of what the scenario observed (unit-tested on fakes in
tests/test_engine_checks.py, so a check that could never fail would be noticed without starting an engine).

A hit is counted three ways, all of which must agree: LMCache's own log line (`LMCache hit tokens: N`), vLLM's
`vllm:external_prefix_cache_hits_total` counter, and the request's `usage.prompt_tokens_details.cached_tokens`.
Expected hits are every full chunk of the prompt at the chunk size of the endpoint's config file (not at what kvtier
rendered, so a wrongly rendered chunk size fails).
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePath
from typing import Any

from kvtier.errors import ExitCode
from kvtier.ops.probe import PROMPT_WORDS
from tests.engine.scenario import Observed, Reading


def _describe(r: Reading) -> str:
    return (
        f"{r.engine}: prompt {r.prompt_tokens} tokens, LMCache hit tokens {r.lmcache_hit_tokens}, retrieved "
        f"{r.retrieved_tokens}, external hits +{r.external_hits_delta:g}, cached_tokens {r.cached_tokens}"
    )


def cross_replica_hit(observed: Observed, key: str) -> None:
    """`key` (a fresh engine) reused every full chunk engine A wrote, by all three counts."""
    r = observed.readings[key]
    full = observed.full_chunk_tokens
    assert r.prompt_tokens >= full > 0, f"the prompt has no full chunk: {_describe(r)}"
    assert r.lmcache_hit_tokens == [full], f"expected LMCache hit tokens [{full}] (every full chunk): {_describe(r)}"
    assert r.retrieved_tokens == [full], f"expected {full} tokens retrieved from L2: {_describe(r)}"
    assert r.external_hits_delta == full, f"expected vLLM external prefix hits +{full}: {_describe(r)}"
    assert r.cached_tokens == full, f"expected cached_tokens {full}: {_describe(r)}"


def writer_stored(observed: Observed) -> None:
    """A stored one file per full chunk, under the directory kvtier rendered (mapped to the shared folder)."""
    r = observed.readings["A"]
    chunks = observed.full_chunk_tokens // observed.chunk_size
    assert r.lmcache_hit_tokens in ([0], []), f"the writer was not cold: {_describe(r)}"
    assert r.l2_dir is not None, f"A's remote_url {observed.urls.get('A')} is not below the L2 mount"
    data = [f for f in r.new_l2_files if f.endswith(".data")]
    assert len(data) == chunks, f"expected {chunks} chunk files from A, found {r.new_l2_files}"
    l2_dir = PurePath(r.l2_dir)
    assert all(l2_dir.name in PurePath(f).parts for f in data), f"A's files {data} are not under {l2_dir}"


def no_hit(observed: Observed, key: str) -> None:
    r = observed.readings[key]
    assert r.prompt_tokens > 0, f"{key} got no usage: {_describe(r)}"
    assert r.lmcache_hit_tokens and all(n == 0 for n in r.lmcache_hit_tokens), f"expected a miss: {_describe(r)}"
    assert r.external_hits_delta == 0, f"expected no external hits: {_describe(r)}"
    assert r.cached_tokens == 0, f"expected cached_tokens 0: {_describe(r)}"


def other_identity(observed: Observed) -> None:
    """D renders another L2 directory than A and reads nothing of A's; it writes its own chunks there."""
    assert observed.urls["D"] != observed.urls["A"], (
        f"kvtier rendered the same L2 URL {observed.urls['A']} for a differing model identity "
        f"({observed.urls.get('identity_how')})"
    )
    no_hit(observed, "D")
    d, a = observed.readings["D"], observed.readings["A"]
    assert d.new_l2_files and not set(d.new_l2_files) & set(a.new_l2_files), (
        f"D wrote {d.new_l2_files}, A wrote {a.new_l2_files}"
    )


def janitor(observed: Observed) -> None:
    """First pass (the LOB's limits): exactly the aged orphans and the stale temporary file go. Second pass (a
    budget of half what is left): the least recently written go first, and what stays fits the budget."""
    assert len(observed.janitor) == 2, "the janitor did not run twice"
    first, second = observed.janitor
    expect = observed.janitor_expect
    assert expect["deleted"], "nothing was set up for the janitor to delete"
    assert first["remaining"] == expect["kept"], (
        f"janitor kept {first['remaining']}, expected {expect['kept']} (deleted should be {expect['deleted']})"
    )
    assert first["errors"] == [], first["errors"]
    kept, mtimes = set(second["remaining"]), second["mtimes"]
    gone = set(mtimes) - kept
    assert gone and kept, f"a budget of half the bytes should delete some and keep some: kept {sorted(kept)}"
    assert max(mtimes[g] for g in gone) <= min(mtimes[k] for k in kept), "the janitor did not delete oldest first"
    assert second["bytes_after"] <= second["budget_bytes_asked"], second


def bench(observed: Observed) -> None:
    """`kvtier bench sweep` A -> B: every length answered on both, and B's scrape counted external (L1/L2) hits."""
    result = observed.bench
    rows = result.get("details", {}).get("sweep", [])
    assert rows, f"no sweep rows in the bench result: {sorted(result)}"
    assert all(r.get("cold_ttft_ms") and r.get("reused_ttft_ms") for r in rows), rows
    read = [c for c in result.get("cache", []) if c.get("url") == result["settings"].get("read_url")]
    hits = sum((c["tiers"].get("external_l1_l2") or {}).get("hit_tokens") or 0 for c in read)
    assert hits > 0, f"the bench saw no external hits on the read URL: {read}"


def probe_hit(observed: Observed) -> None:
    """`kvtier verify --probe` over A and B: exit 0, A wrote to L2, and B took at least every full chunk of the
    2,000-word probe prompt from it (a word is at least one token), by vLLM's counter and LMCache's read bytes."""
    report = observed.probe.get("replicas")
    assert report, "the probe did not run over A and B"
    (result,) = report["results"]
    assert report["exit_code"] == ExitCode.OK and result["outcome"] == "hit", report
    chunk = observed.chunk_size
    assert result["a_write_bytes"] > 0 and result["l2_read_bytes"] > 0, result
    assert result["hit_tokens"] >= PROMPT_WORDS // chunk * chunk and result["hit_tokens"] % chunk == 0, (
        f"expected whole chunks covering at least {PROMPT_WORDS // chunk * chunk} tokens: {result}"
    )


def probe_miss_explained(observed: Observed) -> None:
    """The probe over A and C (another hash seed): exit 1, A wrote, C read nothing, and the message names the
    hashing (the seed) as the likely cause."""
    report = observed.probe.get("other_seed")
    assert report, "the probe did not run over A and C"
    (result,) = report["results"]
    assert report["exit_code"] == ExitCode.PROBLEMS and result["outcome"] == "miss", report
    assert result["a_write_bytes"] > 0 and result["hit_tokens"] == 0 and result["l2_read_bytes"] == 0, result
    assert "PYTHONHASHSEED" in result["message"], f"the miss does not name the hash seed: {result['message']}"


def as_json(observed: Observed) -> dict[str, Any]:
    data = dataclasses.asdict(observed)
    data["bench"] = {
        "sweep": observed.bench.get("details", {}).get("sweep"),
        "cache": [{"url": c.get("url"), "tiers": c.get("tiers")} for c in observed.bench.get("cache", [])],
    }
    return data
