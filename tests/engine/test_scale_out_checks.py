"""The scale-out/scale-in harness without engines (fast, in `make test`): the new replica's settings and the wrong
values it can be rendered with, the router's failover flags it runs with, and its checks on fake observations, so a
check that could never fail is noticed here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvtier import serving
from kvtier.k8s.router import CB_FAILURE_THRESHOLD, RETRY_ATTEMPTS, router_args
from kvtier.rules import load_checked
from tests.engine import render, scale_out_checks
from tests.engine.routers import localize
from tests.engine.scale_out import REQUEST_TIMEOUT_S, STREAM_TOKENS, ScaleObserved
from tests.engine.scenario import BREAKS, ENDPOINT, ENV_NAME, LOB, Reading, broken
from tests.support import CONFIG_DIR

FULL = 2048


def _reading(engine: str, hits: int, ms: float) -> Reading:
    return Reading(engine, 2080, hits, [hits], [hits] if hits else [], [], float(hits), [], "/l2/ep", ms)


def _record(engine: str, start: float, end: float, *, ok: bool = True, status: int = 200, kind: str | None = None, tokens: int = STREAM_TOKENS) -> dict[str, Any]:  # fmt: skip
    return {"session": f"s-{engine}", "engine": engine, "start_ms": start, "end_ms": end, "ok": ok,
            "status": status, "error_kind": kind, "error": None if ok else "cut", "completion_tokens": tokens}  # fmt: skip


def _good() -> ScaleObserved:
    observed = ScaleObserved(chunk_size=256, prefix_full_tokens=FULL)
    observed.urls = {"A": "fs://localhost:0/mnt/kvtier/l2/ep/x/", "C-warm": "fs://localhost:0/mnt/kvtier/l2/ep/x/"}
    observed.cold = [_reading("C-cold", 0, 300.0), _reading("C-cold", 0, 280.0)]
    observed.warm = [_reading("C-warm", FULL, 120.0), _reading("C-warm", FULL, 140.0)]
    observed.stored_chunk_files = 16
    observed.workload_engines = {"prefix0-user0": "A", "prefix0-user1": "A", "prefix0-user2": "B"}
    observed.sessions = {"s-A": "A", "s-B": "B"}
    observed.stop_ms = (1000.0, 7000.0)
    observed.records = [
        _record("A", 0, 500), _record("B", 0, 600), _record("A", 900, 1500),
        _record("B", 800, 2000),  # B was streaming when its pod was deleted: the hook waited for it
        _record("B", 1200, 1400),  # B's session, now on A (the router removed B)
        _record("B", 6000, 6400), _record("A", 6500, 6900),
    ]  # fmt: skip
    observed.termination = {"pre_stop": True, "grace_s": 635}
    observed.deletion = {"deleted_ms": 1000.0, "removed_ms": 1005.0, "hook_done_ms": 6900.0, "gone_ms": 7000.0,
                         "hook_exit": 0, "hook_log": "kvtier drain: drained after 5.9 s; vLLM gets SIGTERM now"}  # fmt: skip
    observed.load = {"processes": 2, "alive_at_stop": 2, "cpu_s": 9.0, "wall_s": 14.0, "cores_busy": 9.0 / 14,
                     "loadavg_1m_at_stop": 5.0, "machine_busy": 0.99, "window_ms": (-50.0, 13950.0)}  # fmt: skip
    return observed


def _scale_in_checks(observed: ScaleObserved) -> None:
    scale_out_checks.scale_in_bounded(observed)
    scale_out_checks.scale_in_under_load(observed)
    scale_out_checks.scale_in_drained_before_sigterm(observed)
    scale_out_checks.scale_in_in_flight_finished(observed)
    scale_out_checks.scale_in_no_loss_after_the_deletion(observed)


def test_checks_pass_on_a_good_run() -> None:
    observed = _good()
    scale_out_checks.same_rendering(observed)
    scale_out_checks.workload_stored(observed)
    scale_out_checks.warm_from_l2(observed, "first")
    scale_out_checks.warm_from_l2(observed, "all")
    scale_out_checks.cold_computed(observed)
    _scale_in_checks(observed)
    assert observed.ratio()["first"] == pytest.approx(2.5)
    assert observed.ratio()["median"] == pytest.approx(290 / 130)


@pytest.mark.parametrize("hits", [0, 1024])  # another seed or URL: nothing; a doubled chunk size: fewer whole chunks
def test_a_new_replica_that_misses_fails(hits: int) -> None:
    observed = _good()
    observed.warm[0] = _reading("C-warm", hits, 300.0)
    with pytest.raises(AssertionError, match="request 1 on the new replica"):
        scale_out_checks.warm_from_l2(observed, "first")
    observed.warm[0] = dataclasses.replace(_reading("C-warm", FULL, 120.0), cached_tokens=0)  # counts must agree
    with pytest.raises(AssertionError, match="cached_tokens"):
        scale_out_checks.warm_from_l2(observed, "all")


def test_other_rendered_l2_and_a_warm_cold_replica_fail() -> None:
    observed = _good()
    observed.urls["C-warm"] = "fs://localhost:0/var/cache/kvtier-l2/ep/"
    with pytest.raises(AssertionError, match="rendered L2 URL"):
        scale_out_checks.same_rendering(observed)
    observed.cold[1] = _reading("C-cold", FULL, 100.0)
    with pytest.raises(AssertionError, match="cold request 2"):
        scale_out_checks.cold_computed(observed)
    observed.stored_chunk_files = 3
    with pytest.raises(AssertionError, match="chunk files"):
        scale_out_checks.workload_stored(observed)
    observed.workload_engines["prefix1-user0"] = "A"  # a prefix that only one engine served: no cross-replica read
    with pytest.raises(AssertionError, match="prefix1 reached only"):
        scale_out_checks.workload_stored(observed)


def test_a_request_lost_after_the_deletion_fails() -> None:
    """What a CI run on a loaded machine saw before the drain: a request sent after B's SIGTERM reached B and was cut
    after the headers."""
    observed = _good()
    observed.records.append(_record("B", 1100, 1300, ok=False, kind="reset", tokens=0))
    with pytest.raises(AssertionError, match="sent after B's deletion failed"):
        scale_out_checks.scale_in_no_loss_after_the_deletion(observed)


def test_streams_cut_at_sigterm_fail() -> None:
    """Without the drain (KVTIER_DRAIN_BREAK=1) vLLM gets SIGTERM at once and aborts the streams it was answering:
    an error event (`server`), a cut connection (`reset`), or a stream that ended early."""
    for record in (
        _record("B", 800, 1400, ok=False, kind="server", tokens=12),
        _record("B", 850, 1100, ok=False, kind="reset", tokens=3),
        _record("B", 900, 1050, tokens=40),
    ):
        observed = _good()
        observed.records.append(record)
        with pytest.raises(AssertionError, match="did not finish"):
            scale_out_checks.scale_in_in_flight_finished(observed)


def test_no_hook_a_hook_at_its_deadline_or_an_idle_machine_fail() -> None:
    observed = _good()
    observed.termination = {"pre_stop": False, "grace_s": 60}
    with pytest.raises(AssertionError, match="no preStop hook"):
        scale_out_checks.scale_in_drained_before_sigterm(observed)
    observed = _good()
    observed.deletion["hook_log"] = "kvtier drain: deadline: still 2 request(s) in flight after 605 s"
    with pytest.raises(AssertionError, match="did not see B drained"):
        scale_out_checks.scale_in_drained_before_sigterm(observed)
    observed = _good()
    observed.load = {}
    with pytest.raises(AssertionError, match="without the CPU hog"):
        scale_out_checks.scale_in_under_load(observed)
    observed = _good()
    observed.load["machine_busy"] = 0.6  # what the engines alone leave busy
    with pytest.raises(AssertionError, match="60% busy"):
        scale_out_checks.scale_in_under_load(observed)
    observed = _good()
    observed.load["window_ms"] = (2000.0, 13950.0)  # started after the traffic
    with pytest.raises(AssertionError, match="the hog ran"):
        scale_out_checks.scale_in_under_load(observed)
    observed = _good()
    observed.load["alive_at_stop"] = 1
    with pytest.raises(AssertionError, match="ended early"):
        scale_out_checks.scale_in_under_load(observed)


def test_scale_in_failures_on_the_survivor_or_hung_requests_fail() -> None:
    observed = _good()
    observed.records.append(_record("A", 6000, 6100, ok=False, status=500, kind="http"))
    with pytest.raises(AssertionError, match="surviving replica A failed"):
        scale_out_checks.scale_in_bounded(observed)
    observed = _good()
    observed.records.append(_record("A", 6000, 6000 + REQUEST_TIMEOUT_S * 1000, ok=False, kind="timeout"))
    with pytest.raises(AssertionError, match="half their timeout"):
        scale_out_checks.scale_in_bounded(observed)
    observed = _good()
    observed.sessions = {"s-A": "A"}
    with pytest.raises(AssertionError, match="did not spread"):
        scale_out_checks.scale_in_bounded(observed)
    observed = _good()
    observed.records = [r for r in observed.records if r["engine"] != "B" or r["end_ms"] < 1000]
    with pytest.raises(AssertionError, match="B streamed nothing"):
        scale_out_checks.scale_in_in_flight_finished(observed)
    with pytest.raises(AssertionError, match="sent nothing after"):
        scale_out_checks.scale_in_no_loss_after_the_deletion(observed)


@pytest.mark.parametrize("what", BREAKS)
def test_each_break_renders_the_new_replica_other_l2_settings(what: str) -> None:
    config = load_checked(CONFIG_DIR, ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    good = render.standalone(config, LOB, endpoint)
    with broken(what):
        bad = render.standalone(config, LOB, endpoint)
    assert (bad.lmcache, bad.env) != (good.lmcache, good.env)
    assert render.standalone(config, LOB, endpoint) == good  # restored for everything rendered afterwards
    assert good.env["PYTHONHASHSEED"] == serving.HASH_SEED


def test_the_router_runs_with_kvtiers_failover_flags() -> None:
    """The harness passes kvtier's retry and circuit-breaker flags through; the circuit opens within one request's
    attempts (so a removed replica's sessions reach a live one before the request runs out of attempts)."""
    config = load_checked(CONFIG_DIR, ENV_NAME)
    local = localize(router_args(LOB, render.endpoint_of(config, LOB, ENDPOINT)), ["http://127.0.0.1:1"], 2, 3)
    flags = {flag: local[i + 1] for i, flag in enumerate(local[:-1]) if flag.startswith("--")}
    assert flags["--retry-max-retries"] == str(RETRY_ATTEMPTS)
    assert flags["--cb-failure-threshold"] == str(CB_FAILURE_THRESHOLD)
    assert CB_FAILURE_THRESHOLD < RETRY_ATTEMPTS


def test_scale_in_traffic_ends_when_the_victim_cannot_be_stopped() -> None:
    """A CI run hung 30 minutes here: stopping B raised, its second timestamp never came and the sessions streamed
    until make's timeout. The traffic must end and the stop's error must surface."""
    import asyncio
    import time
    import types

    from kvtier.bench.records import RequestRecord
    from tests.engine import scale_out
    from tests.engine.engines import EngineError

    def failing_delete(_clock_ms: object) -> Any:
        time.sleep(0.2)
        raise EngineError("process 1 still alive 120 s after SIGKILL")

    async def fake_send(_client: object, req: Any, *, timeout_s: float, origin: float) -> RequestRecord:
        await asyncio.sleep(0.05)
        return RequestRecord(req.run, req.url, req.index, dict(req.tags), (time.perf_counter() - origin) * 1000)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scale_out, "send", fake_send)
        patch.setattr(scale_out, "STOP_AFTER_S", 0.2)
        patch.setattr(scale_out, "AFTER_STOP_S", 0.3)
        router = types.SimpleNamespace(url="http://127.0.0.1:9")
        victim = types.SimpleNamespace(proc=types.SimpleNamespace(pid=1))
        traffic = scale_out.scale_in_traffic(router, victim, "m", {"s": [5, 6, 7]}, failing_delete)  # type: ignore[arg-type]
        with pytest.raises(EngineError, match="after SIGKILL"):
            asyncio.run(asyncio.wait_for(traffic, timeout=20))


def test_the_deletion_follows_the_rendered_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness takes the hook and grace period from kvtier's rendering, localizes only python, port and log, and
    deletes a pod without a hook (the break switch) with SIGTERM at once."""
    from pathlib import Path

    from kvtier.k8s import drain
    from tests.engine.pod_deletion import localize_hook, rendered_termination

    config = load_checked(CONFIG_DIR, ENV_NAME)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    termination = rendered_termination(config, LOB, endpoint)
    assert termination.pre_stop is not None and termination.grace_s == drain.termination_grace_s(endpoint)
    local = localize_hook(termination.pre_stop, "/venv/bin/python", 18000, Path("/tmp/hook.log"))
    assert local[0] == "/venv/bin/python" and local[2] == drain.script() and local[3] == "18000"
    assert local[4:] == [*termination.pre_stop[4:], "/tmp/hook.log"]
    monkeypatch.setenv(drain.BREAK, "1")
    assert rendered_termination(config, LOB, endpoint) == type(termination)(None, drain.OLD_GRACE_S)
