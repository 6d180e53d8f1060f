"""Prometheus text from each server's /metrics, before and after a run, turned into hit tokens per cache tier.

Which tiers the counters can tell apart (vLLM 0.11-0.19 `vllm/v1/metrics/loggers.py`, LMCache 0.3.9-0.5.6
`lmcache/observability.py`; docs/references.md "vLLM and LMCache metrics"):
- L0, the GPU prefix cache: `vllm:prefix_cache_hits_total` / `..._queries_total` (tokens).
- LMCache as vLLM sees it (L1 + L2 together): `vllm:external_prefix_cache_hits_total` / `..._queries_total`.
- LMCache's own count (L1 + L2 together): `lmcache:num_lookup_hits_total` / `lmcache:num_lookup_tokens_total`, the
  prompt tokens LMCache held when vLLM asked (every lookup counts, a miss too). Older LMCache without lookup counters:
  `lmcache:num_hit_tokens_total` / `lmcache:num_requested_tokens_total`, which LMCache 0.4.3 counts only when it
  retrieves, so a miss never shows in that rate (docs/references.md).
- L2 traffic: `lmcache:num_remote_read_requests_total` / `..._bytes_total` (and writes); there is no L2 hit-token counter.
  On vLLM's own connector, its fs tier's read and write bytes (each connector's `hits.l2_io`, kvtier/connectors/).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kvtier.bench.http import TRANSPORT_ERRORS, describe, get
from kvtier.connectors import CONNECTORS, lmcache
from kvtier.connectors.base import EXTERNAL_HITS, EXTERNAL_QUERIES

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of the Prometheus text format (0.0.4); comment lines skipped, bad lines ignored."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parsed = _parse_line(line)
        if parsed is not None:
            samples.append(parsed)
    return samples


def _parse_line(line: str) -> Sample | None:
    i = 0
    while i < len(line) and (line[i].isalnum() or line[i] in "_:"):
        i += 1
    name = line[:i]
    if not name:
        return None
    labels: list[tuple[str, str]] = []
    if i < len(line) and line[i] == "{":
        end = _parse_labels(line, i + 1, labels)
        if end is None:
            return None
        i = end
    fields = line[i:].split()
    if not fields:
        return None
    try:
        value = float(fields[0])  # accepts NaN, +Inf, -Inf
    except ValueError:
        return None
    return Sample(name, tuple(labels), value)


def _parse_labels(line: str, i: int, out: list[tuple[str, str]]) -> int | None:
    """Parse `k="v",...}` from position i; returns the index after `}`. Values may hold escaped quotes and braces."""
    while i < len(line):
        while i < len(line) and line[i] in " ,":
            i += 1
        if i < len(line) and line[i] == "}":
            return i + 1
        eq = line.find("=", i)
        if eq < 0 or eq + 1 >= len(line) or line[eq + 1] != '"':
            return None
        key = line[i:eq].strip()
        j = eq + 2
        value: list[str] = []
        while j < len(line) and line[j] != '"':
            if line[j] == "\\" and j + 1 < len(line):
                j += 1
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(line[j], "\\" + line[j]))
            else:
                value.append(line[j])
            j += 1
        if j >= len(line):
            return None
        out.append((key, "".join(value)))
        i = j + 1
    return None


def total(samples: Iterable[Sample], name: str, **match: str) -> float | None:
    """Sum of a metric over its label sets (those matching `match`); None when the metric is absent."""
    found = [s.value for s in samples if s.name == name and all(dict(s.labels).get(k) == v for k, v in match.items())]
    finite = [v for v in found if math.isfinite(v)]
    return sum(finite) if found else None


@dataclass(frozen=True)
class Tier:
    key: str
    title: str
    hits: tuple[str, ...]  # metric names, first present wins (newest name first)
    queries: tuple[str, ...]


TIERS = (
    Tier(
        "l0_gpu_prefix_cache",
        "L0 GPU prefix cache (vLLM)",
        ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    ),
    Tier(
        "external_l1_l2",
        "LMCache L1+L2 as vLLM sees it (external prefix cache)",
        (EXTERNAL_HITS,),
        (EXTERNAL_QUERIES,),
    ),
    # LMCache looks up the whole prompt, the tokens vLLM already holds in L0 included, and vLLM loads only the rest
    # (lmcache 0.4.3 vllm_v1_adapter.py `get_num_new_matched_tokens`, docs/references.md): this count overlaps L0.
    Tier(
        "lmcache_l1_l2",
        "LMCache held at lookup (L0's tokens included)",
        (lmcache.LOOKUP_HITS, lmcache.HIT_TOKENS),
        (lmcache.LOOKUP_TOKENS, lmcache.REQUESTED_TOKENS),
    ),
)
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")  # vllm:prompt_tokens_by_source (0.19)


def l1_l2_note(metrics: Iterable[str]) -> str:
    """Why L1 and L2 share a row, naming the counters this report read (`metrics`: the L1+L2 tiers' hit metrics)."""
    return (
        "L1 (CPU DRAM) and L2 (shared storage) hit tokens cannot be separated: "
        + " and ".join(metrics)
        + " count both; L2 shows only as remote read requests and bytes"
    )


POD_WIDE_NOTE = "counters are per server process: other traffic during the run is counted too"


@dataclass
class Scrape:
    url: str
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None


async def scrape(client: aiohttp.ClientSession, url: str, *, timeout_s: float) -> Scrape:
    try:
        answer = await get(client, url + "/metrics", timeout_s=timeout_s)
    except TRANSPORT_ERRORS as err:
        return Scrape(url, error=describe(err))
    if answer.status >= 400:
        return Scrape(url, error=f"HTTP {answer.status}")
    return Scrape(url, parse_prometheus(answer.text))


async def scrape_all(client: aiohttp.ClientSession, urls: Iterable[str], *, timeout_s: float) -> list[Scrape]:
    return list(await asyncio.gather(*(scrape(client, u, timeout_s=timeout_s) for u in urls)))


def _delta(before: list[Sample], after: list[Sample], name: str, notes: list[str], **match: str) -> float | None:
    a, b = total(before, name, **match), total(after, name, **match)
    if a is None or b is None:
        return None
    if b < a:
        notes.append(f"{name} went down ({a:g} -> {b:g}): the server restarted during the run; not counted")
        return None
    return b - a


def _first_present(samples: list[Sample], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if total(samples, n) is not None), None)


def cache_report(before: Scrape, after: Scrape) -> dict[str, Any]:
    """Hit tokens per tier that the counters allow, with plain notes on what they cannot separate."""
    report: dict[str, Any] = {"url": before.url, "scraped": False, "tiers": {}, "l2_io": {}, "notes": []}
    notes: list[str] = report["notes"]
    if before.error or after.error:
        notes.append(f"cannot read {before.url}/metrics: {before.error or after.error}")
        return report
    report["scraped"] = True
    for tier in TIERS:
        hits_name = _first_present(after.samples, tier.hits)
        queries_name = _first_present(after.samples, tier.queries)
        if hits_name is None:
            continue
        hits = _delta(before.samples, after.samples, hits_name, notes)
        queries = _delta(before.samples, after.samples, queries_name, notes) if queries_name else None
        report["tiers"][tier.key] = {
            "title": tier.title,
            "hit_tokens": hits,
            "query_tokens": queries,
            "hit_rate": hits / queries if hits is not None and queries else None,
            "metric": hits_name,
        }
    for connector in CONNECTORS:  # an endpoint runs one connector: the first one whose series show wins
        for key, series in connector.hits.l2_io:
            value = _delta(before.samples, after.samples, series.name, notes, **dict(series.labels))
            if value is not None and key not in report["l2_io"]:
                report["l2_io"][key] = value
    sources = {
        s: _delta(before.samples, after.samples, "vllm:prompt_tokens_by_source_total", notes, source=s)
        for s in PROMPT_SOURCES
    }
    if any(v is not None for v in sources.values()):
        report["prompt_tokens_by_source"] = sources
    # The production-stack router's own /metrics also uses `vllm:` names (vllm:current_qps...): look for an engine counter.
    has_vllm = "l0_gpu_prefix_cache" in report["tiers"]
    has_lmcache = any(s.name.startswith(("lmcache:", "vllm:kv_offload_")) for s in after.samples)
    if not has_vllm:
        notes.append(
            f"no vLLM counters at {before.url}/metrics (a router?): pass each pod's URL with --metrics-url "
            "(for example through kubectl port-forward) to see hits per tier"
        )
    elif not has_lmcache:
        notes.append(
            "no lmcache:* series: LMCache is off, or PROMETHEUS_MULTIPROC_DIR is not set in the vLLM container "
            "(LMCache runs in other processes and needs it to reach /metrics); L2 reads cannot be shown"
        )
    l1_l2 = [report["tiers"][k]["metric"] for k in ("external_l1_l2", "lmcache_l1_l2") if k in report["tiers"]]
    if l1_l2:
        notes.append(l1_l2_note(l1_l2))
    notes.append(POD_WIDE_NOTE)
    return report


def note_unseen(reports: list[dict[str, Any]], answered: int) -> None:
    """Say so where a server's engine counters did not move while `answered` requests succeeded: its rows are zeros
    because none of the run reached it (a --metrics-url of another pod), not because nothing hit."""
    if answered == 0:
        return
    for report in reports:
        l0 = report.get("tiers", {}).get("l0_gpu_prefix_cache", {})
        if report.get("scraped") and l0.get("query_tokens") == 0:
            report["notes"].insert(
                0,
                f"{report['url']} counted none of this run's {answered} answered requests (0 prompt tokens): "
                "the requests went elsewhere; pass the URLs of the pods that served them with --metrics-url",
            )


def cache_totals(reports: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Hit and query tokens per tier summed over every scraped URL (for compare and the summary)."""
    out: dict[str, dict[str, float]] = {}
    for report in reports:
        for key, tier in report.get("tiers", {}).items():
            acc = out.setdefault(key, {"hit_tokens": 0.0, "query_tokens": 0.0})
            acc["hit_tokens"] += tier.get("hit_tokens") or 0.0
            acc["query_tokens"] += tier.get("query_tokens") or 0.0
        for key, value in report.get("l2_io", {}).items():
            out.setdefault("l2_io", {}).setdefault(key, 0.0)
            out["l2_io"][key] += value
    return out
