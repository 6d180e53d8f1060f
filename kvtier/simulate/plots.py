"""PNG plots of simulation results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvtier.simulate.elastic import ElasticResult
from kvtier.simulate.result import SimResult

TIER_LABELS = (
    ("l0", "L0 GPU"),
    ("l1", "L1 CPU DRAM"),
    ("l2_same", "L2, own writes"),
    ("l2_other", "L2, other replica"),
)
LOG_SPAN = 10.0  # TTFT on a log axis when the largest value is more than this many times the smallest
SWEEP_PLOTS = {"l1_gib": ("L1 CPU DRAM per replica (GiB)", "l1"), "l2_gb": ("L2 budget of the endpoint (GB)", "l2")}


def ttft_needs_log_axis(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) > LOG_SPAN * min(positive)


def percent_top(values: Sequence[float]) -> float:
    """The top of a 0-based percent axis: a little above the highest value, never past 100 or below 5 (a fixed
    0-100% axis flattens hit rates of a few percent into the floor)."""
    return min(100.0, max(5.0, 1.15 * max(values, default=0.0)))


def log_ticks(axes: Any) -> None:
    """Ticks at 1, 2 and 5 of every decade, written as plain numbers (0.2, 0.5, 1, 2): matplotlib's default puts
    labels only on powers of ten, two labels for a span of 0.1 s to 5 s."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _sizes(result: SimResult, swept: Sequence[str]) -> str:
    l1, l2 = float(result.extra.get("l1_gib", 0.0)), float(result.extra.get("l2_gb", 0.0))
    parts = {"l1_gib": f"L1 {l1:,g} GiB per replica", "l2_gb": f"L2 {l2:,g} GB"}
    return ", ".join(parts[key] for key in swept)


def write_plots(results: Sequence[SimResult], out_dir: Path, title: str) -> list[Path]:
    """Hit rate per tier and TTFT per strategy (at the first configuration of each), and hit rate vs size for each
    swept size (L1, L2). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    firsts: dict[str, SimResult] = {}
    for result in results:
        firsts.setdefault(result.routing, result)
    base = list(firsts.values())
    names = [r.routing for r in base]
    written = []
    swept = [key for key in SWEEP_PLOTS if len({float(r.extra.get(key, 0.0)) for r in results}) > 1]
    # A sweep's per-strategy plots show its first sizes: say which, or they read as the configured endpoint.
    at = f"\nat {_sizes(base[0], swept)} (the first of the sweep)" if swept and base else ""

    figure, axes = plt.subplots(figsize=(7, 4.5))
    bottom = [0.0] * len(base)
    for tier, label in TIER_LABELS:
        values = [100 * r.hit_rate(tier) for r in base]
        axes.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = percent_top(bottom)
    for position, total in enumerate(bottom):
        axes.text(position, total + 0.01 * top, f"{total:.1f}%", ha="center", va="bottom", fontsize=8)
    axes.set_ylabel("prompt tokens served from cache (%)")
    axes.set_ylim(0, top * 1.05)  # room for the totals printed above the bars
    axes.set_title(f"Token hit rate per tier\n{title}{at}", fontsize=9)
    axes.legend(fontsize=8)
    written.append(_save(figure, out_dir / "hit-rate-per-tier.png"))

    figure, axes = plt.subplots(figsize=(7, 4.5))
    width = 0.25
    values = [r.ttft_s[q] for r in base for q in ("p50", "p90", "p99")]
    for offset, quantile in enumerate(("p50", "p90", "p99")):
        axes.bar(
            [i + (offset - 1) * width for i in range(len(base))],
            [r.ttft_s[quantile] for r in base],
            width,
            label=quantile,
        )
    axes.set_xticks(range(len(base)), names)
    if ttft_needs_log_axis(values):
        axes.set_yscale("log")  # p99 queueing can be 100x p50: a linear axis flattens the rest
        log_ticks(axes)
        axes.set_ylabel("time to first token (s, log scale)")
    else:
        axes.set_ylabel("time to first token (s)")
    axes.set_title(f"TTFT per routing strategy\n{title}{at}", fontsize=9)
    axes.legend(fontsize=8)
    written.append(_save(figure, out_dir / "ttft.png"))

    for key, (label, short) in SWEEP_PLOTS.items():
        sizes = sorted({float(r.extra.get(key, 0.0)) for r in results})
        if len(sizes) > 1:
            written.append(
                _sweep_plot(plt, results, firsts, key, sizes, label, title, out_dir / f"hit-rate-vs-{short}.png")
            )
    return written


def _sweep_plot(
    plt: Any,
    results: Sequence[SimResult],
    firsts: dict[str, SimResult],
    key: str,
    sizes: list[float],
    label: str,
    title: str,
    path: Path,
) -> Path:
    figure, axes = plt.subplots(figsize=(7, 4.5))
    tier = "l1" if key == "l1_gib" else "l2"
    shown: list[float] = []
    for routing in firsts:
        runs = sorted((r for r in results if r.routing == routing), key=lambda r: float(r.extra.get(key, 0.0)))
        xs = [sizes.index(float(r.extra.get(key, 0.0))) for r in runs]
        overall = [100 * r.hit_rate() for r in runs]
        line = axes.plot(xs, overall, marker="o", label=f"{routing}: all tiers")
        if tier == "l1":
            part = [100 * r.hit_rate("l1") for r in runs]
        else:
            part = [100 * (r.hit_rate("l2_same") + r.hit_rate("l2_other")) for r in runs]
        axes.plot(xs, part, linestyle="--", color=line[0].get_color(), label=f"{routing}: {tier.upper()}")
        shown += overall + part
    # One evenly spaced, labelled tick per swept size (sweeps are often uneven: 0, 50, 100, 400, 1600).
    axes.set_xticks(range(len(sizes)), [f"{s:,g}" for s in sizes], rotation=45 if len(sizes) > 6 else 0, fontsize=8)
    axes.set_xlabel(f"{label}, one tick per size simulated")
    axes.set_ylabel("prompt tokens served from cache (%)")
    axes.set_ylim(0, percent_top(shown))
    axes.set_title(f"Hit rate vs {tier.upper()} size\n{title}", fontsize=9)
    axes.legend(fontsize=7, ncol=2)
    return _save(figure, path)


def _save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def window_p90(served: Sequence[tuple[float, float]], window_s: float) -> tuple[list[float], list[float]]:
    """TTFT p90 of the requests arriving in each `window_s` window (window midpoints, p90s); empty windows skipped."""
    from kvtier.stats import percentile

    groups: dict[int, list[float]] = {}
    for arrival, ttft in served:
        groups.setdefault(int(arrival // window_s), []).append(ttft)
    mids, p90s = [], []
    for key in sorted(groups):
        value = percentile(sorted(groups[key]), 90)
        if value is not None:
            mids.append((key + 0.5) * window_s)
            p90s.append(value)
    return mids, p90s


def write_elastic_plot(runs: Sequence[tuple[str, ElasticResult]], out_dir: Path, title: str) -> Path:
    """Replicas over time (ready, solid; holding GPUs, dotted) above the TTFT p90 per window of arrivals, one colour
    per labelled run (with and without the shared L2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=(2, 3))
    span = max((t for _, run in runs for t, *_ in run.timeline), default=0.0)
    window = max(runs[0][1].policy.polling_s, span / 60) if runs else 60.0  # about 60 points at most
    values: list[float] = []
    for order, (label, run) in enumerate(runs):
        width = max(3.0 - 1.5 * order, 1.0)  # the first run drawn wider: equal replica counts stay visible
        minutes = [t / 60 for t, *_ in run.timeline]
        line = top.step(
            minutes, [ready for _, ready, _ in run.timeline], where="post", linewidth=width, label=f"{label}: ready"
        )
        colour = line[0].get_color()
        top.step(
            minutes,
            [held for *_, held in run.timeline],
            where="post",
            linestyle=":",
            color=colour,
            label=f"{label}: holding GPUs",
        )
        mids, p90s = window_p90(run.served, window)
        bottom.plot([m / 60 for m in mids], p90s, marker=".", color=colour, label=label)
        values += p90s
    top.set_ylabel("replicas")
    top.yaxis.get_major_locator().set_params(integer=True)
    top.legend(fontsize=7, ncol=2)
    top.set_title(f"Replicas and TTFT under the autoscaler\n{title}", fontsize=9)
    if ttft_needs_log_axis(values):
        bottom.set_yscale("log")
        log_ticks(bottom)
        bottom.set_ylabel(f"TTFT p90 per {window:g} s (s, log)")
    else:
        bottom.set_ylabel(f"TTFT p90 per {window:g} s (s)")
    bottom.set_xlabel("minutes from the first request")
    bottom.legend(fontsize=7)
    return _save(figure, out_dir / "elastic.png")
