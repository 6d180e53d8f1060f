"""HyperPod Tiered Storage keys (issue 34; tests/engine/tiered_storage_keys.py): LMCache's own key code, at the version
kvtier assumes for the operator image, fed kvtier's rendered operator settings, gives each identity, LOB and endpoint
keys of its own and every replica the same ones.

The `engine` tests run in `make test-engine` (they install LMCache from PyPI and need the engine venv); the others
show each check failing on keys that collide, and the break switch.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.connectors.lmcache import TIERED_KEYS_BREAK
from kvtier.versions import OPERATOR_LMCACHE_VERSION
from tests.engine import router_install, tiered_storage_keys
from tests.engine.tiered_storage_keys import Keys, KeysObserved


@pytest.fixture(scope="module")
def observed() -> Iterator[KeysObserved]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    result = tiered_storage_keys.tiered_storage_keys(python, os.environ.get(TIERED_KEYS_BREAK) or None)
    seeds = {name: keys.seed for name, keys in result.keys.items()}
    print(f"\ntiered storage keys: {json.dumps(result.timings_s)} seeds {json.dumps(seeds)}")
    yield result


@pytest.mark.engine
def test_the_key_code_is_the_operator_images_lmcache(observed: KeysObserved) -> None:
    tiered_storage_keys.ran_the_assumed_lmcache(observed)
    tiered_storage_keys.processes_hash_none_alike(observed)
    tiered_storage_keys.every_full_chunk_has_a_key(observed)


@pytest.mark.engine
def test_two_replicas_of_one_endpoint_build_the_same_keys(observed: KeysObserved) -> None:
    tiered_storage_keys.replicas_share_their_keys(observed)


@pytest.mark.engine
def test_another_identity_lob_or_endpoint_never_builds_a_key_of_a(observed: KeysObserved) -> None:
    tiered_storage_keys.identities_never_share_a_key(observed)


# --- without an engine (make test) ---


def test_the_install_pins_the_version_kvtier_assumes() -> None:
    pins = router_install.pins(tiered_storage_keys.LOCK.read_text(encoding="utf-8"))
    assert pins == {"lmcache": OPERATOR_LMCACHE_VERSION}


def _keys(name: str, seed: str, paths: list[str], **changes: object) -> Keys:
    fields: dict[str, object] = {
        "lmcache": OPERATOR_LMCACHE_VERSION,
        "lmcache_file": "/c/operator-lmcache-0123/lmcache/v1/token_database.py",
        "none_hash": 17,
        "hash_of_none": 5,
        "hash_func": "hash",
        "chunk_size": 256,
        "bucket": "lmcache",
    } | changes
    return Keys(name, seed, paths=tuple(paths), **fields)  # type: ignore[arg-type]


def _observed(**seeds_and_paths: tuple[str, list[str]]) -> KeysObserved:
    names = ["A", "A (second replica)", "A, new revision", "A's facts, another LOB", "search's endpoint"]
    keys = {
        name: _keys(name, *seeds_and_paths[key]) for name, key in zip(names, ("a", "a2", "r", "l", "s"), strict=True)
    }
    return KeysObserved(keys, full_chunks=3)


def test_the_checks_fail_on_keys_that_collide() -> None:
    """What the shared seed of before issue 34 gives (every key the same) fails; per-endpoint seeds pass."""
    a = [f"/v1/kv/lmcache/vllm%40%2Fopt%2Fml%2Fmodel%401%400%40{h}%40bfloat16" for h in ("a1", "a2", "a3")]
    other = [p.replace("%40a", "%40b") for p in a]
    good = _observed(a=("11", a), a2=("11", a), r=("12", other), l=("13", [p + "l" for p in a]), s=("14", other))
    tiered_storage_keys.replicas_share_their_keys(good)
    tiered_storage_keys.identities_never_share_a_key(good)
    tiered_storage_keys.every_full_chunk_has_a_key(good)
    shared = _observed(a=("0", a), a2=("0", a), r=("0", a), l=("0", a), s=("0", a))
    with pytest.raises(AssertionError, match=re.escape("A, new revision builds 3 of A's 3 keys")):
        tiered_storage_keys.identities_never_share_a_key(shared)
    per_process = _observed(a=("11", a), a2=("11", other), r=("12", other), l=("13", other), s=("14", other))
    with pytest.raises(AssertionError, match="two replicas of one endpoint built different keys"):
        tiered_storage_keys.replicas_share_their_keys(per_process)


def test_the_precondition_checks_can_fail() -> None:
    a = ["/v1/kv/lmcache/k"] * 3
    unseeded = KeysObserved({"A": _keys("A", "1", a, none_hash=0)}, full_chunks=3)
    with pytest.raises(AssertionError, match="NONE_HASH is 0"):
        tiered_storage_keys.ran_the_assumed_lmcache(unseeded)
    newer = KeysObserved({"A": _keys("A", "1", a, lmcache="0.4.3")}, full_chunks=3)
    with pytest.raises(AssertionError, match=re.escape("LMCache 0.4.3 ran")):
        tiered_storage_keys.ran_the_assumed_lmcache(newer)
    randomised = KeysObserved({"A": _keys("A", "1", a), "B": _keys("B", "2", a, hash_of_none=6)}, full_chunks=3)
    with pytest.raises(AssertionError, match="setarch -R did not take"):
        tiered_storage_keys.processes_hash_none_alike(randomised)


def test_the_break_renders_one_seed_for_every_endpoint() -> None:
    from kvtier.rules import load_checked
    from tests.engine.scenario import REPO

    config = load_checked(REPO / "config", "prod")
    with tiered_storage_keys.broken("1"):
        seeds = {worker[1]["PYTHONHASHSEED"] for worker in (
            tiered_storage_keys.worker(config, lob, e) for lob, e in tiered_storage_keys.renderings(config).values()
        )}  # fmt: skip
    assert seeds == {"0"}
    fixed = {
        tiered_storage_keys.worker(config, lob, e)[1]["PYTHONHASHSEED"]
        for lob, e in tiered_storage_keys.renderings(config).values()
    }
    assert len(fixed) == 4  # A's two replicas share one
    with pytest.raises(ValueError, match=TIERED_KEYS_BREAK), tiered_storage_keys.broken("nonsense"):
        pass
