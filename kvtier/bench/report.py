"""The Markdown summary of a result: settings, per-run latencies, the workload's table, cache hits per tier."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvtier.bench.result import BenchResult


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def markdown(result: BenchResult, plots: Sequence[str] = ()) -> str:
    s = result.settings
    title = f"# kvtier bench: {result.workload}" + (f" ({result.label})" if result.label else "")
    lines = [
        title,
        "",
        f"Started {result.started_at}, {result.duration_s:.1f} s. Model `{s.get('model')}`, API `{s.get('api')}`, "
        f"seed {s.get('seed')}, salt `{s.get('salt')}`.",
        "",
        "## Runs",
        "",
    ]
    rows = []
    for name, summ in result.summaries().items():
        rows.append(
            [
                name,
                str(summ["requests"]),
                str(summ["ok"]),
                str(summ["errors"]),
                ms(summ["ttft_ms"]["p50"]),
                ms(summ["ttft_ms"]["p90"]),
                ms(summ["ttft_ms"]["p99"]),
                ms(summ["itl_ms"]["p50"]),
                ms(summ["e2e_ms"]["p50"]),
                ms(summ["e2e_ms"]["p99"]),
                num(summ["request_throughput"], 2),
                num(summ["output_token_throughput"], 1),
            ]
        )
    header = ["run", "requests", "ok", "errors", "TTFT p50 ms", "p90", "p99", "ITL p50 ms", "E2E p50 ms", "p99"]
    lines += table([*header, "req/s", "out tok/s"], rows)
    lines += [
        "",
        "Latencies in milliseconds; TTFT is send to first generated text; ITL is the gap between streamed chunks.",
    ]
    lines += _errors(result)
    lines += _details(result)
    lines += _cache(result.cache)
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


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
        rows = [
            [
                str(r["length"]),
                num(r["prompt_tokens"]),
                ms(r["cold_ttft_ms"]),
                ms(r["reused_ttft_ms"]),
                ms(r.get("local_ttft_ms")),
                f"{r['speedup']:.2f}x" if r["speedup"] else "-",
            ]
            for r in d.get("sweep", [])
        ]
        note = " Write and read URL are the same: reuse measures that server's own cache." if d.get("same_url") else ""
        return [
            "",
            "## Cold vs reused TTFT",
            "",
            f"Each prompt went cold to {result.settings.get('write_url')}, then byte-identical to "
            f"{result.settings.get('read_url')}.{note}",
            "",
            *table(
                ["length", "prompt tokens (usage)", "cold TTFT ms", "reused TTFT ms", "local TTFT ms", "speedup"], rows
            ),
        ]
    if result.workload == "multiturn":
        rows = [
            [
                str(r["turn"]),
                num(r["prompt_tokens_mean"]),
                ms(r["write_ttft_ms"]["mean"]),
                ms(r["read_ttft_ms"]["mean"]),
            ]
            for r in d.get("turns", [])
        ]
        return [
            "",
            "## Per turn",
            "",
            *table(["turn", "prompt tokens", "write TTFT ms (mean)", "read TTFT ms (mean)"], rows),
        ]
    if result.workload == "shared-prefix":
        rows = [[str(r["round"]), ms(r["ttft_ms"]["p50"]), ms(r["ttft_ms"]["p90"])] for r in d.get("rounds", [])]
        lag = d.get("send_lag_ms", {})
        return [
            "",
            "## Per round",
            "",
            *table(["round", "TTFT p50 ms", "TTFT p90 ms"], rows),
            "",
            f"Send lag behind schedule (concurrency limit, event loop): p50 {ms(lag.get('p50'))} ms, "
            f"max {ms(lag.get('max'))} ms.",
        ]
    if result.workload == "trace":
        ratio = d.get("reusable_prefix_ratio")
        return [
            "",
            "## Trace",
            "",
            f"{d.get('replayed')} of {d.get('requests_in_file')} requests replayed; "
            f"{d.get('skipped_over_max_model_len')} skipped as longer than max_model_len "
            f"{result.settings.get('max_model_len')}. Reusable prefix in the trace (hash ids seen before): "
            f"{num(d.get('reusable_prefix_tokens'))} of {num(d.get('input_tokens'))} input tokens"
            + (f" ({ratio:.0%})." if ratio is not None else "."),
        ]
    return []


def _cache(reports: list[dict[str, Any]]) -> list[str]:
    if not reports:
        return ["", "## Cache hits per tier", "", "Metrics were not scraped (--no-metrics)."]
    out = ["", "## Cache hits per tier", "", "Deltas of each server's /metrics counters over the run (tokens)."]
    for report in reports:
        out += ["", f"### {report['url']}", ""]
        tiers = report.get("tiers", {})
        if tiers:
            out += table(
                ["tier", "hit tokens", "query tokens", "hit rate", "metric"],
                [
                    [
                        t["title"],
                        num(t["hit_tokens"]),
                        num(t["query_tokens"]),
                        f"{t['hit_rate']:.1%}" if t["hit_rate"] is not None else "-",
                        f"`{t['metric']}`",
                    ]
                    for t in tiers.values()
                ],
            )
        io = report.get("l2_io", {})
        if io:
            out += [
                "",
                "L2 traffic: "
                + ", ".join(f"{k.replace('_', ' ')} {num(v)}" for k, v in io.items())
                + " (lmcache:num_remote_*).",
            ]
        by_source = report.get("prompt_tokens_by_source")
        if by_source:
            out += ["", "Prompt tokens by source (vLLM): " + ", ".join(f"{k} {num(v)}" for k, v in by_source.items())]
        out += [""] + [f"- {n}" for n in report.get("notes", [])]
    return out
