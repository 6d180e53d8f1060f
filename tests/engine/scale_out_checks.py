"""What warm scale-out and scale-in promise, checked on what the real engines and router did (scale_out.ScaleObserved;
unit-tested on fake observations in tests/engine/test_scale_out_checks.py, so a check that could never fail is noticed
without starting an engine).

- scale-out: the new replica's first request, and every later first request of a prefix, takes every whole chunk of
  the shared prefix from L2, by LMCache's log line, vLLM's `vllm:external_prefix_cache_hits_total` and the answer's
  `cached_tokens`, all three; kvtier rendered it the same L2 URL as the replicas that wrote; the cold replica (no shared
  L2) computed every token of the same requests.
- scale-in (B's pod deleted under traffic through the real router, with the machine loaded; issue 38):
  `scale_in_bounded`, `scale_in_under_load`, `scale_in_drained_before_sigterm`, `scale_in_in_flight_finished`,
  `scale_in_no_loss_after_the_deletion`. With the drain (kvtier/k8s/drain.py) no request is lost at all; without it
  (`KVTIER_DRAIN_BREAK=1`) the streams B was answering are cut.
"""

from __future__ import annotations

from typing import Any

from tests.engine.scale_out import REQUEST_TIMEOUT_S, ScaleObserved
from tests.engine.scenario import Reading

# The machine's CPUs must have been at least this busy over the phase (/proc/stat, all processes): with a busy loop
# per core they are near 1 whatever else runs; without the hog, the engines and the router alone leave them idle part
# of the time. The hog's own share is reported, not asserted: other work on the machine takes some of it.
MIN_MACHINE_BUSY = 0.9


def _describe(r: Reading) -> str:
    return (
        f"{r.engine}: prompt {r.prompt_tokens} tokens, LMCache hit tokens {r.lmcache_hit_tokens}, retrieved "
        f"{r.retrieved_tokens}, external hits +{r.external_hits_delta:g}, cached_tokens {r.cached_tokens}"
    )


def same_rendering(observed: ScaleObserved) -> None:
    """kvtier renders the new replica the L2 URL of the replicas that wrote (the same endpoint, the same pool)."""
    assert observed.urls.get("C-warm") == observed.urls.get("A"), (
        f"the new replica's rendered L2 URL {observed.urls.get('C-warm')} differs from A's {observed.urls.get('A')}"
    )


def workload_stored(observed: ScaleObserved) -> None:
    """A and B both served every shared prefix, and every prefix's whole chunks reached the shared L2."""
    prefixes = {key.split("-")[0] for key in observed.workload_engines}
    for prefix in sorted(prefixes):
        engines = {e for k, e in observed.workload_engines.items() if k.split("-")[0] == prefix}
        assert engines == {"A", "B"}, f"{prefix} reached only {sorted(engines)}: {observed.workload_engines}"
    expected = len(observed.warm or observed.cold) * observed.prefix_full_tokens // observed.chunk_size
    assert observed.stored_chunk_files >= expected > 0, (
        f"expected {expected} chunk files in the shared L2 after the workload, found {observed.stored_chunk_files}"
    )


def warm_from_l2(observed: ScaleObserved, which: str) -> None:
    """`first`: the new replica's very first request; `all`: each prefix's first request on it."""
    readings = observed.warm[:1] if which == "first" else observed.warm
    assert readings, "the new replica answered no request"
    full = observed.prefix_full_tokens
    for i, r in enumerate(readings):
        where = f"request {i + 1} on the new replica (break: {observed.break_what})"
        assert r.lmcache_hit_tokens == [full], f"{where}: expected LMCache hit tokens [{full}]: {_describe(r)}"
        assert r.retrieved_tokens == [full], f"{where}: expected {full} tokens retrieved from L2: {_describe(r)}"
        assert r.external_hits_delta == full, f"{where}: expected vLLM external prefix hits +{full}: {_describe(r)}"
        assert r.cached_tokens == full, f"{where}: expected cached_tokens {full}: {_describe(r)}"


def cold_computed(observed: ScaleObserved) -> None:
    """The replica without the shared L2 found nothing of the same requests: the baseline computed them all."""
    assert len(observed.cold) == len(observed.warm) > 0, "cold and warm replicas answered different request counts"
    for i, r in enumerate(observed.cold):
        assert r.prompt_tokens > 0 and all(n == 0 for n in r.lmcache_hit_tokens), (
            f"cold request {i + 1} hit: {_describe(r)}"
        )
        assert r.external_hits_delta == 0 and r.cached_tokens == 0, f"cold request {i + 1} hit: {_describe(r)}"


def phase(observed: ScaleObserved, record: dict[str, Any]) -> str:
    """before: ended before B's pod was deleted; in_flight: running then; after: sent after it."""
    deleted = observed.stop_ms[0]
    if record["end_ms"] < deleted:
        return "before"
    return "in_flight" if record["start_ms"] < deleted else "after"


def scale_in_summary(observed: ScaleObserved) -> dict[str, dict[str, dict[str, int]]]:
    """phase -> engine of the session -> {"ok": n, "failed": n}."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for record in observed.records:
        cell = out.setdefault(phase(observed, record), {}).setdefault(record["engine"], {"ok": 0, "failed": 0})
        cell["ok" if record["ok"] else "failed"] += 1
    return out


def scale_in_bounded(observed: ScaleObserved) -> None:
    """Sessions on both engines; traffic on both sides of the deletion; every request ended (answer or error) well
    within its timeout; sessions on the surviving replica A lost nothing."""
    assert set(observed.sessions.values()) == {"A", "B"}, f"sessions did not spread over A and B: {observed.sessions}"
    phases = scale_in_summary(observed)
    assert "before" in phases and "after" in phases, f"no traffic on both sides of B's deletion: {phases}"
    slow = [r for r in observed.records if r["end_ms"] - r["start_ms"] >= REQUEST_TIMEOUT_S * 1000 / 2]
    assert not slow, f"requests took half their timeout or more around the deletion: {slow[:3]}"
    lost_on_a = [r for r in observed.records if r["engine"] == "A" and not r["ok"]]
    assert not lost_on_a, f"sessions on the surviving replica A failed: {lost_on_a[:3]}"


def scale_in_under_load(observed: ScaleObserved) -> None:
    """The CPU hog ran on every core from before the first scale-in request to after the last one, and kept the
    machine busy: the result does not rest on an idle machine."""
    load = observed.load
    assert load, "the scale-in ran without the CPU hog"
    assert load["processes"] >= 2 and load["alive_at_stop"] == load["processes"], f"a hog process ended early: {load}"
    start, stop = load["window_ms"]
    first = min(r["start_ms"] for r in observed.records)
    last = max(r["end_ms"] for r in observed.records)
    assert start <= first and stop >= last, f"the hog ran {start:.0f}-{stop:.0f} ms, the traffic {first:.0f}-{last:.0f}"
    assert load["cpu_s"] > 0, f"the hog burned no CPU: {load}"
    assert load["machine_busy"] >= MIN_MACHINE_BUSY, f"the CPUs were {load['machine_busy']:.0%} busy: {load}"


def scale_in_drained_before_sigterm(observed: ScaleObserved) -> None:
    """B's rendered preStop hook ran, found B drained (not its deadline), and returned before B got SIGTERM."""
    deletion = observed.deletion
    assert observed.termination.get("pre_stop"), (
        f"kvtier rendered no preStop hook for the engines (drain break: {observed.drain_break}): "
        "B gets SIGTERM while it streams"
    )
    assert deletion.get("hook_exit") == 0, f"the preStop hook did not finish: {deletion}"
    assert "drained after" in deletion.get("hook_log", ""), f"the hook did not see B drained: {deletion['hook_log']!r}"
    assert deletion["hook_done_ms"] <= deletion["gone_ms"], deletion


def scale_in_in_flight_finished(observed: ScaleObserved) -> None:
    """B was streaming answers when its pod was deleted, and every one of them finished, all its tokens: the hook
    waited for them before SIGTERM."""
    on_b = [r for r in observed.records if r["engine"] == "B" and phase(observed, r) == "in_flight"]
    assert on_b, f"B streamed nothing when its pod was deleted: {scale_in_summary(observed)}"
    broken = [r for r in on_b if not r["ok"] or r["completion_tokens"] != observed.stream_tokens]
    assert not broken, (
        f"{len(broken)} of {len(on_b)} streams B was answering when its pod was deleted did not finish, first: "
        f"{broken[0]} (drain break: {observed.drain_break})"
    )


def scale_in_no_loss_after_the_deletion(observed: ScaleObserved) -> None:
    """Every request sent after B's pod was deleted succeeded, B's sessions included: the router had taken B out of
    its rotation (the discovery's removal), so they went to A."""
    after = [r for r in observed.records if phase(observed, r) == "after"]
    moved = [r for r in after if r["engine"] == "B"]
    assert moved, f"B's sessions sent nothing after its deletion: {scale_in_summary(observed)}"
    failed = [r for r in after if not r["ok"]]
    assert not failed, (
        f"{len(failed)} of {len(after)} requests sent after B's deletion failed, first: {failed[0]} "
        f"(router flags: {observed.router_args})"
    )
