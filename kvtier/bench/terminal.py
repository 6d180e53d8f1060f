"""Plain-text tables for the terminal (and pipes): 80 columns by default, every column with `wide`.

A table too wide for 80 columns first folds its long row labels onto lines of their own, then drops the columns
marked optional (the line under the table says so); labels and numbers are never cut.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvtier.bench.replicas import replica_summary, unread_note
from kvtier.bench.result import BenchResult

WIDTH = 80
# The client's event loop waking this much later than asked (p99) means it could not keep up: warn.
CLIENT_LAG_WARN_MS = 10.0
GAP = "  "
TIER_NAMES = {
    "l0_gpu_prefix_cache": "L0 GPU prefix cache",
    "external_l1_l2": "L1+L2 (vLLM external)",
    "lmcache_l1_l2": "LMCache held at lookup",
}
# What each tier's query tokens are: vLLM asks LMCache only for what L0 missed, but LMCache looks up whole prompts,
# so its count includes L0's hits (kvtier/bench/metrics.py TIERS) and must not read as a third tier.
OF_WHAT = {
    "l0_gpu_prefix_cache": "prompt tokens",
    "external_l1_l2": "tokens L0 missed",
    "lmcache_l1_l2": "prompt tokens, L0's hits included",
}


@dataclass(frozen=True)
class Column:
    title: str
    left: bool = False  # labels align left, numbers right
    optional: bool = False  # dropped first when 80 columns are not enough


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def size(value: float | None) -> str:
    """Bytes in binary units, as in the summary and compare."""
    if value is None:
        return "-"
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= factor:
            return f"{value / factor:,.1f} {unit}"
    return f"{value:,.0f} B"


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None = WIDTH) -> list[str]:
    """Rows under a header; with a `width`, folded and then thinned until every line fits."""
    keep = list(range(len(columns)))
    dropped = False
    while True:
        lines = _lay_out([columns[i] for i in keep], [[row[i] for i in keep] for row in rows], width)
        if width is None or all(len(line) <= width for line in lines):
            break
        optional = [i for i in keep if columns[i].optional]
        if not optional:
            break  # nothing left to drop: print it wide rather than cut a number
        keep.remove(optional[-1])
        dropped = True
    if dropped:
        lines.append("(some columns left out to fit 80 characters: --wide shows all)")
    return lines


def _lay_out(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> list[str]:
    widths = [max([len(c.title), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    folded: set[int] = set()
    if width is not None and columns and columns[0].left:
        rest = sum(widths[1:]) + len(GAP) * (len(columns) - 1)
        room = max(len(columns[0].title), width - rest)
        if widths[0] > room:
            folded = {n for n, r in enumerate(rows) if len(r[0]) > room}
            widths[0] = max([len(columns[0].title), *(len(r[0]) for n, r in enumerate(rows) if n not in folded)])

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if col.left else c.rjust(w) for c, w, col in zip(cells, widths, columns, strict=True)]
        return GAP.join(parts).rstrip()

    out = [line([c.title for c in columns]), GAP.join("-" * w for w in widths)]
    for n, row in enumerate(rows):
        if n in folded:
            out.append(row[0])
            out.append(line(["", *row[1:]]))
        else:
            out.append(line(row))
    return out


def printable(text: str) -> str:
    """`text` with each non-printable character written as its escape (\\x1b, \\n): a result file's strings (a
    label) must not reach the terminal as control sequences."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def wrap(text: str, width: int | None = WIDTH, indent: str = "") -> list[str]:
    """Prose wrapped at spaces (URLs, paths and numbers stay whole); continuation lines indented under the text."""
    if width is None:
        return [indent + text]
    follow = " " * len(indent) if indent.strip() else indent + "  "
    return textwrap.wrap(
        text, width, initial_indent=indent, subsequent_indent=follow, break_long_words=False, break_on_hyphens=False
    ) or [indent]


def run_table(result: BenchResult, wide: bool) -> list[str]:
    """Per run (per run and length for the sweep): counts, TTFT, TPOT, ITL, E2E, throughput, goodput."""
    qs = [f"p{q:g}" for q in result.percentiles]
    top = qs[-1]
    slo = result.slo_ms
    summaries = result.summaries()
    if wide:
        columns = [Column("run", left=True), Column("ok/n"), Column("errors")]
        for metric in ("TTFT", "TPOT", "ITL", "E2E"):
            columns += [Column(f"{metric} {q}") for q in qs] + [Column(f"{metric} mean")]
        columns += [Column("req/s"), Column("out tok/s")] + ([Column("good"), Column("good/s")] if slo else [])
    else:
        columns = [Column("run", left=True), Column("ok/n"), Column("TTFT p50"), Column(top)]
        columns += [Column("TPOT p50"), Column("ITL p50", optional=True), Column("E2E p50", optional=True)]
        columns += [Column("req/s")] + ([Column("good")] if slo else [])
    rows = []
    for name, s in summaries.items():
        row = [name, f"{s['ok']}/{s['requests']}"]
        if wide:
            row.append(str(s["errors"]))
            for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                row += [ms(s[key].get(q)) for q in qs] + [ms(s[key]["mean"])]
            row += [num(s["request_throughput"], 2), num(s["output_token_throughput"], 1)]
            if slo:
                row += [pct(s["goodput"]["good_fraction"]), num(s["goodput"]["request_goodput"], 2)]
        else:
            row += [ms(s["ttft_ms"].get("p50")), ms(s["ttft_ms"].get(top)), ms(s["tpot_ms"].get("p50"))]
            row += [ms(s["itl_ms"].get("p50")), ms(s["e2e_ms"].get("p50")), num(s["request_throughput"], 2)]
            if slo:
                row.append(pct(s["goodput"]["good_fraction"]))
        rows.append(row)
    width = None if wide else WIDTH
    lines = render(columns, rows, width)
    over = "time with a request in flight" if result.settings.get("throughput_over") == "busy" else "the run's span"
    legend = f"Milliseconds. req/s over {over}."
    if slo:
        bounds = ", ".join(f"{k} <= {v:g} ms" for k, v in slo.items())
        legend += f" good: requests meeting every SLO ({bounds})."
    if not wide:
        legend += f" {top} is the highest of --percentiles; --wide shows every percentile."
    return lines + wrap(legend, width)


def sweep_table(result: BenchResult, wide: bool) -> list[str]:
    rows_in = result.details.get("sweep", [])
    if not rows_in:
        return []
    has_local = any(r.get("local_ttft_ms") is not None for r in rows_in)
    repeats = max((r.get("repeats") or 1 for r in rows_in), default=1)
    columns = [Column("length", left=True), Column("tokens"), Column("cold ms"), Column("reused ms")]
    if wide and repeats > 1:
        columns += [Column("cold min"), Column("cold max"), Column("reused min"), Column("reused max")]
    if has_local:
        columns.append(Column("local ms", optional=True))
    columns.append(Column("speedup"))
    if repeats > 1:
        columns.append(Column("range", optional=True))
    columns.append(Column("status", left=True))
    rows = []
    for r in rows_in:
        failed = r.get("status", "ok")
        cold = ms(r["cold_ttft_ms"]) if r["cold_ttft_ms"] is not None else ("failed" if r.get("cold_error") else "-")
        reused = (
            ms(r["reused_ttft_ms"]) if r["reused_ttft_ms"] is not None else ("failed" if r.get("reused_error") else "-")
        )
        row = [str(r["length"]), num(r.get("prompt_tokens")), cold, reused]
        if wide and repeats > 1:
            cs, rs = r.get("cold_ttft_spread_ms") or {}, r.get("reused_ttft_spread_ms") or {}
            row += [ms(cs.get("min")), ms(cs.get("max")), ms(rs.get("min")), ms(rs.get("max"))]
        if has_local:
            row.append(ms(r.get("local_ttft_ms")))
        row.append(f"{r['speedup']:.2f}x" if r["speedup"] else "-")
        if repeats > 1:
            sp = r.get("speedup_spread") or {}
            row.append(f"{sp['min']:.2f}-{sp['max']:.2f}x" if sp.get("min") is not None else "-")
        row.append(failed)
        rows.append(row)
    width = None if wide else WIDTH
    lines = ["", "Cold vs reused TTFT per length"]
    lines += render(columns, rows, width)
    what = "median over repeats; range: fastest to slowest speedup" if repeats > 1 else "one sample per length"
    hint = "" if repeats > 1 else " (--repeat N for a median)"
    lines += wrap(f"TTFT in ms, {what}; speedup = cold / reused{hint}.", width)
    for r in rows_in:
        for side in ("cold", "reused"):
            if r.get(f"{side}_error") and r.get("status") != "ok":
                lines += wrap(f"length {r['length']} {side}: {r[f'{side}_error']}", width, "! ")
    return lines


def turn_rows(turns: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The multiturn table's rows (terminal and Markdown): turn, mean prompt tokens, mean TTFTs, reads."""
    return [
        [
            str(r["turn"]),
            num(r["prompt_tokens_mean"]),
            ms(r["write_ttft_ms"]["mean"]),
            ms(r["read_ttft_ms"]["mean"]),
            str(r.get("reads", "-")),
        ]
        for r in turns
    ]


def detail_lines(result: BenchResult, wide: bool) -> list[str]:
    """The workload's own table or line, besides the sweep's: per turn, or what a trace replay sent."""
    width = None if wide else WIDTH
    d = result.details
    if result.workload == "multiturn" and d.get("turns"):
        columns = [Column("turn", left=True), Column("tokens"), Column("write ms"), Column("read ms"), Column("reads")]
        lines = ["", "Mean TTFT per turn", *render(columns, turn_rows(d["turns"]), width)]
        return lines + wrap("read: a history the read URL never saw, after all turns ran on the write URL.", width)
    if result.workload == "trace":
        cut = d.get("cut_by_duration") or 0
        text = (
            f"trace: {d.get('replayed')} of {d.get('requests_in_file')} requests replayed, "
            f"{d.get('skipped_over_max_model_len')} longer than --max-model-len skipped"
            + (f", {cut} after --duration not sent" if cut else "")
        )
        return wrap(text, width)
    return []


def cache_lines(reports: Sequence[dict[str, Any]], wide: bool) -> list[str]:
    width = None if wide else WIDTH
    lines: list[str] = []
    shared = shared_notes(reports)
    for report in reports:
        lines.append(f"cache at {report['url']}:")
        for key, t in report.get("tiers", {}).items():
            name = TIER_NAMES.get(key, key)
            hits, queries = num(t.get("hit_tokens")), num(t.get("query_tokens"))
            what = OF_WHAT.get(key, "tokens")
            lines += wrap(f"{name}: {hits} of {queries} {what} ({pct(t.get('hit_rate'))})", width, "  ")
        io = report.get("l2_io", {})
        if io:
            reads = f"{num(io.get('read_requests'))} ({size(io.get('read_bytes'))})"
            writes = f"{num(io.get('write_requests'))} ({size(io.get('write_bytes'))})"
            lines += wrap(f"L2 reads {reads}, writes {writes}", width, "  ")
        if not report.get("tiers") and not io:
            lines.append("  none readable")
        for note in report.get("notes", []):
            if note not in shared:
                lines += wrap(note, width, "  - ")
    if shared:
        lines.append("cache notes:" if len(reports) == 1 else f"cache notes (all {len(reports)} servers):")
        lines += [line for note in shared for line in wrap(note, width, "  - ")]
    return lines


def shared_notes(reports: Sequence[dict[str, Any]]) -> list[str]:
    """Notes every report has (said once, after the servers); the others stay with their server."""
    if len(reports) < 2:
        return []
    first: list[str] = list(reports[0].get("notes", []))
    return [n for n in first if all(n in r.get("notes", []) for r in reports[1:])]


def summary_lines(result: BenchResult, wide: bool = False) -> list[str]:
    width = None if wide else WIDTH
    title = f"kvtier bench {result.workload} (salt {result.settings.get('salt')})"
    if result.label:
        title += f" {result.label}"
    lines = wrap(printable(title), width)  # a label or salt holding "\x1b[31m" must not recolour the terminal
    for p in result.probes:
        if not p["answered"]:
            lines += wrap(f"warning: {p['url']} did not answer GET /v1/models: {p['error']}", width)
    saturated = client_saturation(result)
    if saturated:
        lines += wrap(saturated, width, "warning: ")
    if result.partial:
        lines += wrap(partial_note(result), width, "PARTIAL: ")
    lines += run_table(result, wide)
    lines += sweep_table(result, wide)
    lines += detail_lines(result, wide)
    lines += cache_lines(result.cache, wide)
    lines += replica_lines(result, width)
    return lines


def client_saturation(result: BenchResult) -> str | None:
    """A sentence when the client itself fell behind (its event loop woke late): its TTFTs include that delay."""
    lag = result.details.get("client_loop_lag_ms") or {}
    worst = lag.get("p99") if lag.get("p99") is not None else lag.get("max")
    if not isinstance(worst, int | float) or worst <= CLIENT_LAG_WARN_MS:
        return None
    return (
        f"the client was saturated: its event loop ran up to {worst:,.0f} ms late (p99; over {CLIENT_LAG_WARN_MS:g} "
        "ms), so TTFTs include client delay; lower --concurrency or the rate, or run the client on a less busy machine"
    )


def replica_lines(result: BenchResult, width: int | None) -> list[str]:
    """Requests per replica, from the router's counter (only with --router-metrics-url)."""
    if not result.settings.get("router_metrics_url"):
        return []
    summary = replica_summary(result.records)
    served = ", ".join(f"{replica} {count}" for replica, count in summary["per_replica"].items()) or "none known"
    text = f"served by (router metrics): {served}"
    note = unread_note(result)
    if note:  # never read: saying "overlapped" would send the reader after the wrong cause
        text += f"; {note}"
    elif summary["unknown"]:
        text += f"; {summary['unknown']} overlapped another request or were not counted (replica unknown)"
    return wrap(text, width)


def partial_note(result: BenchResult) -> str:
    info = result.interrupted or {}
    return (
        f"interrupted by {info.get('signal', 'a signal')}: {len(result.records)} requests finished and are "
        f"reported, {info.get('dropped_in_flight', 0)} in flight were dropped."
    )
