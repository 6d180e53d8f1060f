"""PNG plots of a result (matplotlib, Agg; no display needed). matplotlib is imported only when plotting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtier.bench.result import BenchResult
from kvtier.bench.terminal import printable

COLD, REUSED, LOCAL = "#c0504d", "#4f81bd", "#9bbb59"
FAILED = "#d62728"


def write_plots(result: BenchResult, outdir: Path) -> list[Path]:
    """Every plot that fits the workload; returns the files written."""
    written = []
    if result.workload == "sweep" and result.details.get("sweep"):
        written.append(sweep_plot(result, outdir / "sweep_ttft.png"))
    if result.workload == "multiturn" and result.details.get("turns"):
        written.append(multiturn_plot(result, outdir / "multiturn_ttft.png"))
    if result.workload in ("trace", "shared-prefix") and result.records:
        written.append(cdf_plot(result, outdir / "latency_cdf.png"))
        written.append(timeline_plot(result, outdir / "timeline.png"))
    if result.group_by is None and any(s["ok"] for s in result.summaries().values()):
        written.append(percentiles_plot(result, outdir / "ttft_percentiles.png"))
    return written


def _figure(width: float = 8.0, height: float = 4.5) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _title(ax: Any, result: BenchResult, text: str) -> None:
    """The plot's title, and the run's --label on a second line: two runs' PNGs side by side tell which is which."""
    if result.label:
        # A label with "$...$" would be drawn (or fail to parse) as mathtext; control characters print escaped.
        text += "\n" + printable(result.label).replace("$", r"\$")
    ax.set_title(text)


def sweep_plot(result: BenchResult, path: Path) -> Path:
    """Cold vs reused TTFT per prompt length, each pair labelled with its speedup."""
    rows = result.details["sweep"]
    has_local = any(r.get("local_ttft_ms") is not None for r in rows)
    fig = _figure()
    ax = fig.add_subplot()
    width = 0.27 if has_local else 0.38
    xs = list(range(len(rows)))
    series = [("cold (write URL)", "cold_ttft_ms", COLD), ("reused (read URL)", "reused_ttft_ms", REUSED)]
    if has_local:
        series.append(("again on write URL", "local_ttft_ms", LOCAL))
    shift = -(len(series) - 1) / 2
    failed_side = {"cold_ttft_ms": "cold", "reused_ttft_ms": "reused", "local_ttft_ms": "local"}
    measured = [v for r in rows for k in failed_side if (v := r.get(k)) is not None]
    marker = 0.5 * max(measured, default=100.0)  # a failure is drawn as a hatched outline, never as a 0 ms bar
    failed_legend: str | None = "failed (no successful answer)"
    for k, (label, key, color) in enumerate(series):
        spread_key = key.replace("_ms", "_spread_ms")
        legend: str | None = label
        for x, r in zip(xs, rows, strict=True):
            at = x + (shift + k) * width
            value = r.get(key)
            if value is None:
                if r.get(f"{failed_side[key]}_error"):
                    ax.bar(at, marker, width, color="none", edgecolor=FAILED, hatch="//", label=failed_legend)
                    ax.text(at, marker / 2, "failed", color=FAILED, rotation=90, ha="center", va="center")
                    failed_legend = None
                continue
            spread = r.get(spread_key) or {}
            err = None
            if spread.get("min") is not None and spread.get("max") is not None and spread["max"] > spread["min"]:
                err = [[value - spread["min"]], [spread["max"] - value]]
            ax.bar(at, value, width, color=color, yerr=err, capsize=3, label=legend)
            legend = None  # one legend entry per series
    for x, r in zip(xs, rows, strict=True):
        top = max(
            v for v in (r.get("cold_ttft_ms"), r.get("reused_ttft_ms"), r.get("local_ttft_ms"), 0) if v is not None
        )
        text = f"{r['speedup']:.2f}x" if r.get("speedup") else str(r.get("status") or "n/a")
        ax.annotate(text, (x, top), xytext=(0, 4), textcoords="offset points", ha="center", fontweight="bold")
    ax.set_xticks(xs, [_length_label(r) for r in rows])
    ax.set_xlabel("prompt length (requested; server-counted tokens below)")
    ax.set_ylabel("TTFT (ms)")
    repeats = result.details.get("repeat", 1)
    what = f"median of {repeats}, bars: fastest to slowest" if repeats > 1 else "one sample each"
    _title(ax, result, f"Cold vs reused TTFT ({what}), speedup = cold / reused")
    ax.margins(y=0.15)
    fig.legend(loc="outside lower center", ncol=len(series))
    fig.savefig(path)
    return path


def _length_label(row: dict[str, Any]) -> str:
    tokens = row.get("prompt_tokens")
    return f"{row['length']}\n({tokens} tok)" if tokens is not None else str(row["length"])


def multiturn_plot(result: BenchResult, path: Path) -> Path:
    """Mean TTFT per turn on the write URL and on the read URL (band: min to max over conversations)."""
    rows = result.details["turns"]
    fig = _figure()
    ax = fig.add_subplot()
    turns = [r["turn"] for r in rows]
    for key, label, color in (
        ("write_ttft_ms", "write URL (first time)", COLD),
        ("read_ttft_ms", "read URL (history it never saw: L2)", REUSED),
    ):
        points = [(t, r[key]) for t, r in zip(turns, rows, strict=True) if r[key]["mean"] is not None]
        if not points:
            continue
        ax.plot([t for t, _ in points], [d["mean"] for _, d in points], marker="o", label=label, color=color)
        ax.fill_between(
            [t for t, _ in points],
            [d["min"] for _, d in points],
            [d["max"] for _, d in points],
            alpha=0.15,
            color=color,
        )
    ax.set_xticks(turns)
    ax.set_xlabel("turn (history grows every turn)")
    ax.set_ylabel("TTFT (ms)")
    _title(ax, result, "Multi-turn: TTFT per turn")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.savefig(path)
    return path


def cdf_plot(result: BenchResult, path: Path) -> Path:
    """TTFT and E2E latency CDFs over every request sent: failures never reach the top, the gap is their share."""
    records = result.records
    fig = _figure()
    ax = fig.add_subplot()
    n = len(records)
    for key, label, color in (("ttft_ms", "TTFT", REUSED), ("e2e_ms", "end to end", LOCAL)):
        values = sorted(v for r in records if r.ok and (v := getattr(r, key)) is not None)
        if values:
            ax.step(values, [(i + 1) / n for i in range(len(values))], where="post", label=label, color=color)
    failed = sum(1 for r in records if not r.ok)
    if failed:
        ax.axhline(1 - failed / n, color=FAILED, linestyle="--", label=f"{failed} of {n} failed (never complete)")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of requests sent")
    ax.set_ylim(0, 1.02)
    _title(ax, result, f"Latency CDF ({result.workload}, {n} requests)")
    ax.legend(loc="lower right")
    fig.savefig(path)
    return path


def timeline_plot(result: BenchResult, path: Path) -> Path:
    """TTFT of each request at its send time; failed requests as red crosses along the top."""
    records = result.records
    fig = _figure()
    ax = fig.add_subplot()
    ok = [r for r in records if r.ok and r.ttft_ms is not None]
    bad = [r for r in records if not r.ok]
    if ok:
        ax.scatter([r.start_ms / 1000 for r in ok], [r.ttft_ms for r in ok], s=10, color=REUSED, label="TTFT")
    top = max([r.ttft_ms or 0 for r in ok] or [1.0]) * 1.1
    if bad:
        kinds = sorted({r.error_kind or "unknown" for r in bad})
        ax.scatter(
            [r.start_ms / 1000 for r in bad],
            [top] * len(bad),
            marker="x",
            s=30,
            color=FAILED,
            label=f"failed ({', '.join(kinds)})",
        )
    ax.set_xlabel("send time (s from the start)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0, top=top * 1.08)
    _title(ax, result, f"Timeline ({result.workload}): TTFT by send time")
    ax.legend(loc="upper left")
    fig.savefig(path)
    return path


def percentiles_plot(result: BenchResult, path: Path) -> Path:
    """TTFT at each chosen percentile, every run side by side."""
    summaries = {name: s for name, s in result.summaries().items() if s["ok"]}
    fig = _figure()
    ax = fig.add_subplot()
    names = list(summaries)
    qs = [f"p{q:g}" for q in result.percentiles]
    width = 0.8 / len(qs)
    colors = ("#4f81bd", "#f79646", "#c0504d", "#8064a2", "#4bacc6", "#9bbb59")
    for k, q in enumerate(qs):
        values = [summaries[n]["ttft_ms"].get(q) or 0 for n in names]
        offset = (k - (len(qs) - 1) / 2) * width
        bars = ax.bar([i + offset for i in range(len(names))], values, width, label=q, color=colors[k % len(colors)])
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(names)), [f"{n}\n({summaries[n]['ok']} ok)" for n in names])
    ax.set_ylabel("TTFT (ms)")
    _title(ax, result, f"TTFT percentiles per run ({result.workload})")
    ax.margins(y=0.12)
    ax.legend()
    fig.savefig(path)
    return path
