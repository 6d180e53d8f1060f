"""PNG plots of a result (matplotlib, Agg; no display needed). matplotlib is imported only when plotting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtier.bench.result import BenchResult

COLD, REUSED, LOCAL = "#c0504d", "#4f81bd", "#9bbb59"


def write_plots(result: BenchResult, outdir: Path) -> list[Path]:
    """Every plot that fits the workload; returns the files written."""
    written = []
    if result.workload == "sweep" and result.details.get("sweep"):
        written.append(sweep_plot(result, outdir / "sweep_ttft.png"))
    if result.workload == "multiturn" and result.details.get("turns"):
        written.append(multiturn_plot(result, outdir / "multiturn_ttft.png"))
    if any(s["ok"] for s in result.summaries().values()):
        written.append(percentiles_plot(result, outdir / "ttft_percentiles.png"))
    return written


def _figure(width: float = 8.0, height: float = 4.5) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


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
    for k, (label, key, color) in enumerate(series):
        ax.bar([x + (shift + k) * width for x in xs], [r.get(key) or 0 for r in rows], width, label=label, color=color)
    for x, r in zip(xs, rows, strict=True):
        top = max(
            v for v in (r.get("cold_ttft_ms"), r.get("reused_ttft_ms"), r.get("local_ttft_ms"), 0) if v is not None
        )
        text = f"{r['speedup']:.2f}x" if r.get("speedup") else "n/a"
        ax.annotate(text, (x, top), xytext=(0, 4), textcoords="offset points", ha="center", fontweight="bold")
    ax.set_xticks(xs, [_length_label(r) for r in rows])
    ax.set_xlabel("prompt length (requested; server-counted tokens below)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"Cold vs reused TTFT, speedup = cold / reused ({result.settings.get('model')})")
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
        ("read_ttft_ms", "read URL (replay)", REUSED),
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
    ax.set_title("Multi-turn: TTFT per turn")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.savefig(path)
    return path


def percentiles_plot(result: BenchResult, path: Path) -> Path:
    """TTFT p50/p90/p99 of every run side by side."""
    summaries = {name: s for name, s in result.summaries().items() if s["ok"]}
    fig = _figure()
    ax = fig.add_subplot()
    names = list(summaries)
    width = 0.25
    for k, (q, color) in enumerate((("p50", "#4f81bd"), ("p90", "#f79646"), ("p99", "#c0504d"))):
        values = [summaries[n]["ttft_ms"][q] or 0 for n in names]
        bars = ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, label=q, color=color)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(names)), [f"{n}\n({summaries[n]['ok']} ok)" for n in names])
    ax.set_ylabel("TTFT (ms)")
    ax.set_title(f"TTFT percentiles per run ({result.workload})")
    ax.margins(y=0.12)
    ax.legend()
    fig.savefig(path)
    return path
