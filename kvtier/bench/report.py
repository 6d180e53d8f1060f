"""The Markdown summary of a result: settings, per-run latencies, the workload's table, cache hits per tier.

Numbers use the units of the terminal summary and of `compare` (kvtier.bench.terminal): ms, %, binary bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvtier.bench.replicas import unread_note
from kvtier.bench.result import BenchResult
from kvtier.bench.terminal import (
    OF_WHAT,
    TIER_NAMES,
    ms,
    num,
    partial_note,
    pct,
    printable,
    shared_notes,
    size,
    turn_rows,
)

__all__ = ["markdown", "ms", "num", "table"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def markdown(result: BenchResult, plots: Sequence[str] = ()) -> str:
    s = result.settings
    title = f"# kvtier bench: {result.workload}" + (f" ({printable(result.label)})" if result.label else "")
    lines = [title, ""]
    if result.partial:
        lines += [f"**Partial run**: {partial_note(result)}", ""]
    lines += [
        f"Started {result.started_at}, {result.duration_s:.1f} s. Model `{s.get('model')}`, API `{s.get('api')}`, "
        f"seed {s.get('seed')}, salt `{printable(str(s.get('salt')))}`.",
        "",
        "## Runs",
        "",
    ]
    qs = [f"p{q:g}" for q in result.percentiles]
    slo = result.slo_ms
    header = ["run", "requests", "ok", "errors"]
    for metric in ("TTFT", "TPOT", "ITL", "E2E"):
        header += [f"{metric} {q} ms" for q in qs]
    header += ["req/s", "out tok/s"] + (["good", "good req/s"] if slo else [])
    rows = []
    for name, summ in result.summaries().items():
        row = [name, str(summ["requests"]), str(summ["ok"]), str(summ["errors"])]
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            row += [ms(summ[key].get(q)) for q in qs]
        row += [num(summ["request_throughput"], 2), num(summ["output_token_throughput"], 1)]
        if slo:
            row += [pct(summ["goodput"]["good_fraction"]), num(summ["goodput"]["request_goodput"], 2)]
        rows.append(row)
    lines += table(header, rows)
    over = "the time with a request in flight (pauses excluded)" if s.get("throughput_over") == "busy" else "the span"
    lines += [
        "",
        "Latencies in milliseconds. TTFT: send to first generated text. TPOT: decode time over the tokens after the "
        "first. ITL: gap between chunks carrying text. E2E: send to end of stream. Throughput over "
        + over
        + "."
        + (" The sweep is summarized per prompt length, never pooled over lengths." if result.group_by else ""),
    ]
    if slo:
        bounds = ", ".join(f"{k} <= {v:g} ms" for k, v in slo.items())
        lines += ["", f"Goodput: requests that succeeded and met every SLO ({bounds}), as vLLM's `--goodput`."]
    lines += _errors(result)
    lines += _details(result)
    lines += _cache(result.cache)
    lines += _replicas(result)
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _replicas(result: BenchResult) -> list[str]:
    """Per request, the replica that served it (with --router-metrics-url; from the router's per-replica counter)."""
    if not result.settings.get("router_metrics_url"):
        return []
    rows = [
        [
            str(r.index),
            r.run,
            r.replica or "unknown",
            ms(r.ttft_ms),
            str(r.cached_tokens if r.cached_tokens is not None else ""),
        ]
        for r in result.records
    ]
    return [
        "",
        "## Which replica served each request",
        "",
        "From the router's `vllm_router_processed_requests_total{worker}`, read before and after each request that ran "
        "alone; `unknown`: it overlapped another request.",
        *_unread(result),
        "",
        *table(["request", "run", "replica", "TTFT ms", "cached tokens"], rows),
    ]


def _unread(result: BenchResult) -> list[str]:
    """The counter was never read: then `unknown` means that, not an overlap."""
    note = unread_note(result)
    return ["", f"**{note}**"] if note else []


def _errors(result: BenchResult) -> list[str]:
    failed = [r for r in result.records if not r.ok]
    if not failed:
        return []
    out = ["", "## Errors", ""]
    seen: dict[str, int] = {}
    for r in failed:
        key = f"{r.run} {r.url}: {r.error_kind}: {r.error}"
        seen[key] = seen.get(key, 0) + 1
    out += [f"- {count} x {key}" for key, count in list(seen.items())[:20]]
    return out


def _details(result: BenchResult) -> list[str]:
    d = result.details
    if result.workload == "sweep":
        return _sweep(result)
    if result.workload == "multiturn":
        rows = turn_rows(d.get("turns", []))
        return [
            "",
            "## Per turn",
            "",
            "Each conversation ran all its turns on the write URL first; then the read URL got it once, as the full "
            "history of one turn it had never seen, so a fast read there comes from L2 alone.",
            "",
            *table(["turn", "prompt tokens", "write TTFT ms (mean)", "read TTFT ms (mean)", "reads"], rows),
        ]
    if result.workload == "shared-prefix":
        qs = [f"p{q:g}" for q in result.percentiles]
        rows = [[str(r["round"]), *(ms(r["ttft_ms"].get(q)) for q in qs)] for r in d.get("rounds", [])]
        lag = d.get("send_lag_ms", {})
        return [
            "",
            "## Per round",
            "",
            *table(["round", *(f"TTFT {q} ms" for q in qs)], rows),
            "",
            f"Send lag behind schedule (concurrency limit, event loop): p50 {ms(lag.get('p50'))} ms, "
            f"max {ms(lag.get('max'))} ms.",
        ]
    if result.workload == "trace":
        ratio = d.get("reusable_prefix_ratio")
        cut = d.get("cut_by_duration") or 0
        return [
            "",
            "## Trace",
            "",
            f"{d.get('replayed')} of {d.get('requests_in_file')} requests replayed; "
            f"{d.get('skipped_over_max_model_len')} skipped as longer than max_model_len "
            f"{result.settings.get('max_model_len')}"
            + (f"; {cut} not sent, scheduled after --duration" if cut else "")
            + ". Reusable prefix in the trace (hash ids seen before): "
            f"{num(d.get('reusable_prefix_tokens'))} of {num(d.get('input_tokens'))} input tokens"
            + (f" ({ratio:.0%})." if ratio is not None else "."),
        ]
    return []


def _sweep(result: BenchResult) -> list[str]:
    d = result.details
    rows = []
    for r in d.get("sweep", []):
        status = r.get("status", "ok")
        cold = (
            ms(r["cold_ttft_ms"]) if r["cold_ttft_ms"] is not None else ("**failed**" if r.get("cold_error") else "-")
        )
        reused = (
            ms(r["reused_ttft_ms"])
            if r["reused_ttft_ms"] is not None
            else ("**failed**" if r.get("reused_error") else "-")
        )
        cs, rs, sp = (r.get(k) or {} for k in ("cold_ttft_spread_ms", "reused_ttft_spread_ms", "speedup_spread"))
        rows.append(
            [
                str(r["length"]),
                num(r["prompt_tokens"]),
                str(r.get("repeats", 1)),
                cold,
                f"{ms(cs.get('min'))}-{ms(cs.get('max'))}",
                reused,
                f"{ms(rs.get('min'))}-{ms(rs.get('max'))}",
                ms(r.get("local_ttft_ms")),
                f"{r['speedup']:.2f}x" if r["speedup"] else "-",
                f"{sp['min']:.2f}-{sp['max']:.2f}x" if sp.get("min") is not None else "-",
                status,
            ]
        )
    note = " Write and read URL are the same: reuse measures that server's own cache." if d.get("same_url") else ""
    warm = [w for w in d.get("warmup", []) if not w.get("ok")]
    out = [
        "",
        "## Cold vs reused TTFT",
        "",
        f"Each prompt went cold to {result.settings.get('write_url')}, then byte-identical to "
        f"{result.settings.get('read_url')}; medians over {d.get('repeat', 1)} repeat(s), each with a fresh salt, "
        f"with the fastest and slowest.{note}",
        "",
        *table(
            [
                "length",
                "prompt tokens (usage)",
                "repeats",
                "cold TTFT ms",
                "cold range",
                "reused TTFT ms",
                "reused range",
                "local TTFT ms",
                "speedup",
                "speedup range",
                "status",
            ],
            rows,
        ),
    ]
    errors = [
        f"- length {r['length']} {side}: {r[f'{side}_error']}"
        for r in d.get("sweep", [])
        for side in ("cold", "reused")
        if r.get(f"{side}_error") and r.get("status") != "ok"
    ]
    if errors:
        out += ["", *errors]
    if warm:
        out += ["", *(f"- warm-up of {w['url']} failed: {w['error']}" for w in warm)]
    return out


def _cache(reports: list[dict[str, Any]]) -> list[str]:
    if not reports:
        return ["", "## Cache hits per tier", "", "Metrics were not scraped (--no-metrics)."]
    out = ["", "## Cache hits per tier", "", "Deltas of each server's /metrics counters over the run (tokens)."]
    shared = shared_notes(reports)
    for report in reports:
        out += ["", f"### {report['url']}", ""]
        tiers = report.get("tiers", {})
        if tiers:
            out += table(
                ["tier", "hit tokens", "of", "hit rate", "metric"],
                [
                    [
                        TIER_NAMES.get(key, t["title"]),
                        num(t["hit_tokens"]),
                        f"{num(t['query_tokens'])} {OF_WHAT.get(key, 'tokens')}",
                        pct(t["hit_rate"]),
                        f"`{t['metric']}`",
                    ]
                    for key, t in tiers.items()
                ],
            )
        io = report.get("l2_io", {})
        if io:
            out += [
                "",
                f"L2 traffic: {num(io.get('read_requests'))} reads ({size(io.get('read_bytes'))}), "
                f"{num(io.get('write_requests'))} writes ({size(io.get('write_bytes'))}) (lmcache:num_remote_*).",
            ]
        by_source = report.get("prompt_tokens_by_source")
        if by_source:
            out += ["", "Prompt tokens by source (vLLM): " + ", ".join(f"{k} {num(v)}" for k, v in by_source.items())]
        out += [""] + [f"- {n}" for n in report.get("notes", []) if n not in shared]
    if shared:
        out += ["", f"Every server ({len(reports)}):", "", *(f"- {n}" for n in shared)]
    return out
