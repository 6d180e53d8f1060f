"""Prometheus text parsing and per-tier deltas, on texts shaped like vLLM 0.19 and LMCache 0.4 /metrics."""

from __future__ import annotations

import math
from typing import Any

from kvtier.bench.metrics import (
    Scrape,
    cache_report,
    cache_totals,
    l1_l2_note,
    note_unseen,
    parse_prometheus,
    total,
)
from kvtier.bench.terminal import cache_lines

TEXT = """\
# HELP vllm:prefix_cache_queries Prefix cache queries.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m \\"q\\", {x}"} 1000.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e+09
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 400.0 1700000000000
vllm:external_prefix_cache_queries_total{engine="0"} 600
vllm:external_prefix_cache_hits_total{engine="0"} 250
vllm:prompt_tokens_by_source_total{engine="0",source="local_cache_hit"} 400
vllm:prompt_tokens_by_source_total{engine="0",source="external_kv_transfer"} 250
vllm:prompt_tokens_by_source_total{engine="0",source="local_compute"} 350
lmcache:num_hit_tokens_total{worker_id="0"} 200
lmcache:num_hit_tokens_total{worker_id="1"} 50
lmcache:num_requested_tokens_total{worker_id="0"} 600
lmcache:num_remote_read_requests_total{worker_id="0"} 3
lmcache:num_remote_read_bytes_total{worker_id="0"} 3e6
lmcache:retrieve_hit_rate{worker_id="0"} NaN
bad line without value
"""


def _bump(text: str, factor: float) -> str:
    """The same text with every counter multiplied (a later scrape)."""
    samples = parse_prometheus(text)
    lines = []
    for s in samples:
        labels = ",".join(f'{k}="{v}"' for k, v in s.labels if '"' not in v)
        lines.append(f"{s.name}{{{labels}}} {s.value * factor}")
    return "\n".join(lines)


def test_parse_names_labels_values() -> None:
    samples = parse_prometheus(TEXT)
    first = samples[0]
    assert first.name == "vllm:prefix_cache_queries_total"
    assert dict(first.labels) == {"engine": "0", "model_name": 'm "q", {x}'}
    assert first.value == 1000.0
    assert total(samples, "vllm:prefix_cache_hits_total") == 400.0  # a trailing timestamp is not the value
    assert total(samples, "lmcache:num_hit_tokens_total") == 250.0  # summed over workers
    assert total(samples, "lmcache:num_remote_read_bytes_total") == 3e6
    assert total(samples, "vllm:prompt_tokens_by_source_total", source="local_compute") == 350.0
    assert total(samples, "vllm:nope_total") is None
    nan = [s for s in samples if s.name == "lmcache:retrieve_hit_rate"]
    assert len(nan) == 1 and math.isnan(nan[0].value)
    assert not any(s.name == "bad" for s in samples)


def test_cache_report_deltas_per_tier() -> None:
    before = Scrape("http://pod", parse_prometheus(TEXT))
    after = Scrape("http://pod", parse_prometheus(_bump(TEXT, 3)))
    report = cache_report(before, after)
    tiers = report["tiers"]
    assert tiers["l0_gpu_prefix_cache"]["hit_tokens"] == 800.0
    assert tiers["l0_gpu_prefix_cache"]["query_tokens"] == 2000.0
    assert tiers["l0_gpu_prefix_cache"]["hit_rate"] == 0.4
    assert tiers["external_l1_l2"]["hit_tokens"] == 500.0
    assert tiers["lmcache_l1_l2"]["hit_tokens"] == 500.0
    assert tiers["lmcache_l1_l2"]["query_tokens"] == 1200.0
    assert report["l2_io"] == {"read_requests": 6.0, "read_bytes": 6e6}
    assert report["prompt_tokens_by_source"] == {
        "local_compute": 700.0,
        "local_cache_hit": 800.0,
        "external_kv_transfer": 500.0,
    }
    # The note names the counters this report read (here the retrieve-time LMCache count), not a fixed one.
    assert tiers["lmcache_l1_l2"]["metric"] == "lmcache:num_hit_tokens_total"
    assert l1_l2_note(["vllm:external_prefix_cache_hits_total", "lmcache:num_hit_tokens_total"]) in report["notes"]
    totals = cache_totals([report, report])
    assert totals["l0_gpu_prefix_cache"] == {"hit_tokens": 1600.0, "query_tokens": 4000.0}
    assert totals["l2_io"]["read_requests"] == 12.0


def test_lmcache_tier_counts_misses_through_the_lookup_counters() -> None:
    """LMCache 0.4.3 counts requested and hit tokens only when it retrieves: a miss moves only its lookup counters.
    One hit (300 of 300 tokens) and one miss (0 of 300): the lookup rate is 50%, the retrieve rate would say 100%."""
    names = ("lookup_tokens", "lookup_hits", "requested_tokens", "hit_tokens")
    before = "\n".join(f"lmcache:num_{n}_total 0" for n in names)
    after = "lmcache:num_lookup_tokens_total 600\nlmcache:num_lookup_hits_total 300\n"
    after += "lmcache:num_requested_tokens_total 300\nlmcache:num_hit_tokens_total 300\n"
    report = cache_report(Scrape("http://pod", parse_prometheus(before)), Scrape("http://pod", parse_prometheus(after)))
    tier = report["tiers"]["lmcache_l1_l2"]
    assert (tier["hit_tokens"], tier["query_tokens"], tier["hit_rate"]) == (300.0, 600.0, 0.5)
    assert tier["metric"] == "lmcache:num_lookup_hits_total"


def test_older_vllm_names_are_used_when_new_ones_are_absent() -> None:
    old = "vllm:gpu_prefix_cache_hits_total 10\nvllm:gpu_prefix_cache_queries_total 20\n"
    new = "vllm:gpu_prefix_cache_hits_total 15\nvllm:gpu_prefix_cache_queries_total 40\n"
    tier = cache_report(Scrape("u", parse_prometheus(old)), Scrape("u", parse_prometheus(new)))["tiers"][
        "l0_gpu_prefix_cache"
    ]
    assert (tier["hit_tokens"], tier["query_tokens"], tier["metric"]) == (5.0, 20.0, "vllm:gpu_prefix_cache_hits_total")


def test_counter_reset_is_reported_not_counted() -> None:
    report = cache_report(
        Scrape("u", parse_prometheus("vllm:prefix_cache_hits_total 100\n")),
        Scrape("u", parse_prometheus("vllm:prefix_cache_hits_total 5\n")),
    )
    assert report["tiers"]["l0_gpu_prefix_cache"]["hit_tokens"] is None
    assert any("went down" in n for n in report["notes"])


def test_missing_lmcache_and_router_notes() -> None:
    vllm_only = parse_prometheus("vllm:prefix_cache_hits_total 1\n")
    report = cache_report(Scrape("u", vllm_only), Scrape("u", vllm_only))
    assert any("PROMETHEUS_MULTIPROC_DIR" in n for n in report["notes"])
    # production-stack's router serves its own gauges under vllm: names
    router = parse_prometheus('vllm:current_qps{server="x"} 3\nvllm:healthy_pods_total{server="x"} 2\n')
    report = cache_report(Scrape("r", router), Scrape("r", router))
    assert report["tiers"] == {}
    assert any("--metrics-url" in n for n in report["notes"])


def test_unreachable_metrics_are_a_note() -> None:
    report = cache_report(Scrape("u", error="HTTP 404"), Scrape("u", error="HTTP 404"))
    assert report["scraped"] is False
    assert report["notes"] == ["cannot read u/metrics: HTTP 404"]


def _report(url: str, l0: tuple[int, int], external: tuple[int, int], lookup: tuple[int, int]) -> dict[str, Any]:
    """A report from two real scrapes whose counters moved by the given (hits, queries) per tier."""
    names = {
        "vllm:prefix_cache": l0,
        "vllm:external_prefix_cache": external,
    }
    after = [f"{n}_hits_total {h}\n{n}_queries_total {q}" for n, (h, q) in names.items()]
    after += [f"lmcache:num_lookup_hits_total {lookup[0]}", f"lmcache:num_lookup_tokens_total {lookup[1]}"]
    before = [line.rsplit(" ", 1)[0] + " 0" for line in "\n".join(after).splitlines()]
    return cache_report(
        Scrape(url, parse_prometheus("\n".join(before))), Scrape(url, parse_prometheus("\n".join(after)))
    )


def test_lmcache_lookup_count_is_not_shown_as_a_tier_beside_l0() -> None:
    """LMCache looks up whole prompts, so on a pod that served its own repeats its count equals L0's (94.3% and
    94.3%): the summary says what each count is of, and names the counters its caveat is about."""
    lines = cache_lines([_report("http://a", (943, 1000), (0, 57), (943, 1000))], wide=False)
    text = "\n".join(lines)
    assert "  L0 GPU prefix cache: 943 of 1,000 prompt tokens (94.3%)" in lines
    assert "  L1+L2 (vLLM external): 0 of 57 tokens L0 missed (0.0%)" in lines
    assert "LMCache held at lookup: 943 of 1,000 prompt tokens, L0's hits included" in text
    assert "L1+L2 (LMCache)" not in text
    assert "vllm:external_prefix_cache_hits_total and lmcache:num_lookup_hits_total" in " ".join(text.split())
    assert "lmcache:num_hit_tokens_total" not in text  # a counter this report did not read


def test_notes_every_server_shares_are_said_once() -> None:
    reports = [_report(u, (0, 100), (90, 100), (90, 100)) for u in ("http://a", "http://b", "http://c")]
    lines = cache_lines(reports, wide=True)
    assert sum("counters are per server process" in line for line in lines) == 1
    assert sum("cannot be separated" in line for line in lines) == 1
    assert lines.index("cache notes (all 3 servers):") > max(i for i, line in enumerate(lines) if "cache at" in line)


def test_a_metrics_url_the_run_never_reached_says_so() -> None:
    reached, elsewhere = (
        _report("http://a", (0, 100), (90, 100), (90, 100)),
        _report("http://b", (0, 0), (0, 0), (0, 0)),
    )
    note_unseen([reached, elsewhere], answered=4)
    assert not any("counted none" in n for n in reached["notes"])
    assert elsewhere["notes"][0] == (
        "http://b counted none of this run's 4 answered requests (0 prompt tokens): the requests went elsewhere; "
        "pass the URLs of the pods that served them with --metrics-url"
    )
    quiet = _report("http://c", (0, 0), (0, 0), (0, 0))
    note_unseen([quiet], answered=0)  # nothing answered: nothing to have missed
    assert not any("counted none" in n for n in quiet["notes"])


def test_vllms_own_connector_shows_its_fs_tier_reads_and_writes() -> None:
    """`cache.connector: vllm`: L2 I/O is the fs tier's (tier="1:fs"), and no note says LMCache is missing."""
    text = (
        'vllm:prefix_cache_hits_total{engine="0"} 10\n'
        'vllm:external_prefix_cache_hits_total{engine="0"} 992\n'
        'vllm:external_prefix_cache_queries_total{engine="0"} 1000\n'
        'vllm:kv_offload_tiering_read_bytes_total{engine="0",tier="1:fs"} 1015808\n'
        'vllm:kv_offload_tiering_write_bytes_total{engine="0",tier="1:fs"} 2031616\n'
        'vllm:kv_offload_tiering_read_bytes_total{engine="0",tier="2:obj"} 999\n'
    )
    report = cache_report(Scrape("u", parse_prometheus(_bump(text, 0))), Scrape("u", parse_prometheus(text)))
    assert report["l2_io"] == {"read_bytes": 1015808, "write_bytes": 2031616}
    assert report["tiers"]["external_l1_l2"]["hit_tokens"] == 992
    assert not any("PROMETHEUS_MULTIPROC_DIR" in n for n in report["notes"])
