"""`kvtier verify --probe` against stub engines on 127.0.0.1: a shared L2 (hit, exit 0), separate caches (miss,
exit 1), a dead pod (exit 3); and the pod choice (two ready pods on different nodes)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest

from kvtier.bench.testserver import Behaviour, FakeCluster, free_port
from kvtier.cli.verify import probe_targets, run_probe
from kvtier.config.loader import Config
from kvtier.errors import ExitCode
from kvtier.ops.probe import PROMPT_WORDS, Pod, ProbeTiming, UnreachableError, pick_pair
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

CONFIG = load_checked(CONFIG_DIR, "dev")


class StubAccess:
    """Every endpoint has pods a (node-1) and b (node-2), reached at the given URLs."""

    def __init__(self, url_a: str, url_b: str, pods: list[Pod] | None = None) -> None:
        self.urls = {"a": url_a, "b": url_b}
        self._pods = pods if pods is not None else [Pod("a", "node-1", True), Pod("b", "node-2", True)]
        self.asked: list[tuple[str, str]] = []  # (lob, endpoint or pod) the probe asked for

    def pods(self, lob: str, endpoint: str) -> list[Pod]:
        self.asked.append((lob, endpoint))
        return list(self._pods)

    @contextlib.asynccontextmanager
    async def connect(self, lob: str, pod: Pod) -> AsyncIterator[str]:
        self.asked.append((lob, pod.name))
        yield self.urls[pod.name]


class NoCluster(StubAccess):
    def pods(self, lob: str, endpoint: str) -> list[Pod]:
        self.asked.append((lob, endpoint))
        raise UnreachableError("the Kubernetes API does not answer")


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


@pytest.fixture()
def shared() -> Iterator[FakeCluster]:
    with FakeCluster(2) as cluster:
        yield cluster


def _run(
    access: StubAccess, capsys: pytest.CaptureFixture[str], timing: ProbeTiming | None = None
) -> tuple[int, dict[str, Any]]:
    code = run_probe(CONFIG, access, as_json=True, timing=timing)
    return code, json.loads(capsys.readouterr().out)


def test_dev_probes_its_l2_endpoints() -> None:
    assert probe_targets(CONFIG) == [(lob.name, e.name) for lob in CONFIG.lobs for e in lob.endpoints]
    assert probe_targets(CONFIG)  # dev has an L2 endpoint


def test_two_pods_sharing_l2_hit_and_exit_0(shared: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = shared.servers
    access = StubAccess(a.url, b.url)
    code, report = _run(access, capsys)
    assert code == ExitCode.OK, report
    ((lob, endpoint),) = probe_targets(CONFIG)
    assert access.asked == [(lob, endpoint), (lob, "a"), (lob, "b")]
    (result,) = report["results"]
    assert result["outcome"] == "hit" and (result["pod_a"], result["pod_b"]) == ("a", "b")
    assert result["hit_tokens"] == PROMPT_WORDS  # every word of the prompt came from the shared store to B
    assert b.log[-1].l2_hit == PROMPT_WORDS and b.log[-1].local_hit == 0
    assert a.log[-1].words == b.log[-1].words and len(a.log) == len(b.log) == 1  # exactly the two requests


def test_salt_makes_every_run_cold(shared: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = shared.servers
    assert _run(StubAccess(a.url, b.url), capsys)[0] == ExitCode.OK
    assert _run(StubAccess(a.url, b.url), capsys)[0] == ExitCode.OK
    assert a.log[1].local_hit < 16 and a.log[1].l2_hit < 16  # the second run's prompt was new to A


def test_two_pods_with_separate_caches_miss_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(1) as one, FakeCluster(1) as other:
        # A miss waits out the settle time (nothing ever shows up on B): short here, since the stubs publish at once.
        code, report = _run(StubAccess(one.urls[0], other.urls[0]), capsys, ProbeTiming(settle_s=1.0))
    assert code == ExitCode.PROBLEMS
    (result,) = report["results"]
    assert result["outcome"] == "miss" and result["hit_tokens"] == 0 and result["a_write_bytes"] > 0
    assert "PYTHONHASHSEED" in result["message"] and "LMCACHE_REMOTE_URL" in result["message"]


def test_a_hit_that_lmcache_publishes_late_is_still_a_hit(capsys: pytest.CaptureFixture[str]) -> None:
    """LMCache publishes its counters from a thread every 10 s: the probe must wait for B's reads to show (here one
    publication every 1.5 s, and a settle time of three of them), not judge B's counters the moment it answers."""
    with FakeCluster(2, Behaviour(lmcache_publish_s=1.5)) as late:
        a, b = late.servers
        code, report = _run(StubAccess(a.url, b.url), capsys, ProbeTiming(store_wait_s=5.0, settle_s=4.5))
    (result,) = report["results"]
    assert code == ExitCode.OK and result["outcome"] == "hit", result
    assert result["l2_read_bytes"] > 0 and result["hit_tokens"] == PROMPT_WORDS


def test_a_miss_that_lmcache_publishes_late_names_the_hashing(capsys: pytest.CaptureFixture[str]) -> None:
    """Real LMCache counts `num_requested_tokens` only when it retrieves, so on a miss only its lookup counters move,
    and only at the next publication: the probe waits for the lookup and then blames the hashing, not the config."""
    late = Behaviour(lmcache_publish_s=1.0)
    with FakeCluster(1, late) as one, FakeCluster(1, late) as other:
        code, report = _run(StubAccess(one.urls[0], other.urls[0]), capsys, ProbeTiming(store_wait_s=5.0, settle_s=4.0))
    (result,) = report["results"]
    assert code == ExitCode.PROBLEMS and result["outcome"] == "miss", result
    assert result["counters"]["lmcache:num_lookup_tokens_total"] >= PROMPT_WORDS, result
    assert "PYTHONHASHSEED" in result["message"], result["message"]


def test_a_dead_pod_exits_3(shared: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(StubAccess(shared.urls[0], _dead_url()), capsys)
    assert code == ExitCode.UNAVAILABLE
    assert report["results"][0]["outcome"] == "unreachable"


def test_no_cluster_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(NoCluster("", ""), capsys)
    assert code == ExitCode.UNAVAILABLE
    assert "does not answer" in report["results"][0]["message"]


def test_pods_on_one_node_are_not_a_cross_node_probe(shared: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    pods = [Pod("a", "node-1", True), Pod("b", "node-1", True), Pod("c", "node-2", False)]
    code, report = _run(StubAccess(shared.urls[0], shared.urls[1], pods), capsys)
    assert code == ExitCode.PROBLEMS
    assert "two ready pods on different nodes" in report["results"][0]["message"]
    assert not shared.servers[0].log  # nothing was sent


def test_pick_pair_prefers_ready_pods_on_distinct_nodes() -> None:
    pods = [Pod("c", "n2", True), Pod("a", "n1", False), Pod("b", "n1", True)]
    assert pick_pair(pods) == (Pod("b", "n1", True), Pod("c", "n2", True))
    assert pick_pair([Pod("a", "n1", True)]) is None


# ---- vLLM's own connector (`cache.connector: vllm`): judged by its fs tier's counters --------------------------------

FS_TIER = Behaviour(fs_tier_metrics=True, lmcache_metrics=False)  # a vLLM-connector pod exports no lmcache:* series


def _vllm_connector(config: Config) -> Config:
    lobs = tuple(
        lob.model_copy(
            update={
                "endpoints": tuple(
                    e.model_copy(update={"cache": e.cache.model_copy(update={"connector": "vllm"})})
                    for e in lob.endpoints
                )
            }
        )
        for lob in config.lobs
    )
    return replace(config, lobs=lobs)


def test_vllm_connector_pods_sharing_l2_hit_by_the_fs_tier_counters(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2, FS_TIER) as shared:
        a, b = shared.servers
        code = run_probe(_vllm_connector(CONFIG), StubAccess(a.url, b.url), as_json=True)
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == ExitCode.OK and result["outcome"] == "hit", result
    assert result["hit_tokens"] == PROMPT_WORDS and result["l2_read_bytes"] > 0
    assert "vLLM's fs tier" in result["message"]


def test_vllm_connector_pods_with_separate_fs_tiers_miss_and_name_the_hashing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FakeCluster(1, FS_TIER) as one, FakeCluster(1, FS_TIER) as other:
        code = run_probe(
            _vllm_connector(CONFIG),
            StubAccess(one.urls[0], other.urls[0]),
            as_json=True,
            timing=ProbeTiming(settle_s=1.0),
        )
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == ExitCode.PROBLEMS and result["outcome"] == "miss", result
    assert result["a_write_bytes"] > 0 and result["hit_tokens"] == 0
    assert "--prefix-caching-hash-algo" in result["message"], result["message"]


def test_vllm_connector_pods_without_the_fs_tier_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    """Judged by LMCache's counters, this pair would look like a hit; by vLLM's, the fs tier is missing."""
    with FakeCluster(2) as lmcache_pods:
        a, b = lmcache_pods.servers
        code = run_probe(
            _vllm_connector(CONFIG), StubAccess(a.url, b.url), as_json=True, timing=ProbeTiming(settle_s=1.0)
        )
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == ExitCode.PROBLEMS and result["outcome"] == "miss", result
    assert "no vllm:kv_offload_tiering_* series" in result["message"]


def test_vllm_connector_loads_that_fail_are_named_not_taken_for_hashing(capsys: pytest.CaptureFixture[str]) -> None:
    """B's fs tier finds A's blocks but every load fails (vLLM 0.32 on a mount that fails O_DIRECT reads: a real
    engine counts a promotion job failure and recomputes, tools/l2engines.py): the probe names the failed loads and
    O_DIRECT, not a hashing difference."""
    failing = Behaviour(fs_tier_metrics=True, lmcache_metrics=False, fs_reads_fail=True)
    with FakeCluster(2, failing) as shared:
        a, b = shared.servers
        code = run_probe(
            _vllm_connector(CONFIG), StubAccess(a.url, b.url), as_json=True, timing=ProbeTiming(settle_s=1.0)
        )
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == ExitCode.PROBLEMS and result["outcome"] == "miss", result
    assert result["a_write_bytes"] > 0 and result["hit_tokens"] == 0 and result["l2_read_bytes"] == 0
    assert "1 load job(s) failed" in result["message"] and "O_DIRECT" in result["message"], result["message"]
    assert "hash differently" not in result["message"]
    assert result["counters"]["vllm:kv_offload_tiering_promotion_job_failures_total{tier='1:fs'}"] == 1
