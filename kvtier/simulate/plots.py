"""PNG plots of simulation results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvtier.simulate.result import SimResult

TIER_LABELS = (
    ("l0", "L0 GPU"),
    ("l1", "L1 CPU DRAM"),
    ("l2_same", "L2, own writes"),
    ("l2_other", "L2, other replica"),
)


def write_plots(results: Sequence[SimResult], out_dir: Path, title: str) -> list[Path]:
    """Hit rate per tier and TTFT per strategy (at the first configuration of each), and hit rate vs L2 size
    when several L2 sizes were simulated. Returns the files written."""
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

    figure, axes = plt.subplots(figsize=(7, 4.5))
    bottom = [0.0] * len(base)
    for tier, label in TIER_LABELS:
        values = [100 * r.hit_rate(tier) for r in base]
        axes.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for position, total in enumerate(bottom):
        axes.text(position, total + 1, f"{total:.1f}%", ha="center", fontsize=8)
    axes.set_ylabel("prompt tokens served from cache (%)")
    axes.set_ylim(0, 100)
    axes.set_title(f"Token hit rate per tier\n{title}", fontsize=9)
    axes.legend(fontsize=8)
    written.append(_save(figure, out_dir / "hit-rate-per-tier.png"))

    figure, axes = plt.subplots(figsize=(7, 4.5))
    width = 0.25
    for offset, quantile in enumerate(("p50", "p90", "p99")):
        axes.bar(
            [i + (offset - 1) * width for i in range(len(base))],
            [r.ttft_s[quantile] for r in base],
            width,
            label=quantile,
        )
    axes.set_xticks(range(len(base)), names)
    axes.set_ylabel("time to first token (s)")
    axes.set_title(f"TTFT per routing strategy\n{title}", fontsize=9)
    axes.legend(fontsize=8)
    written.append(_save(figure, out_dir / "ttft.png"))

    sizes = sorted({float(r.extra.get("l2_gb", 0.0)) for r in results})
    if len(sizes) > 1:
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for routing in firsts:
            runs = sorted((r for r in results if r.routing == routing), key=lambda r: float(r.extra.get("l2_gb", 0.0)))
            gb = [float(r.extra.get("l2_gb", 0.0)) for r in runs]
            line = axes.plot(gb, [100 * r.hit_rate() for r in runs], marker="o", label=f"{routing}: all tiers")
            l2 = [100 * (r.hit_rate("l2_same") + r.hit_rate("l2_other")) for r in runs]
            axes.plot(gb, l2, linestyle="--", color=line[0].get_color(), label=f"{routing}: L2")
        axes.set_xlabel("L2 budget of the endpoint (GB)")
        axes.set_ylabel("prompt tokens served from cache (%)")
        axes.set_ylim(0, 100)
        axes.set_title(f"Hit rate vs L2 size\n{title}", fontsize=9)
        axes.legend(fontsize=7, ncol=2)
        written.append(_save(figure, out_dir / "hit-rate-vs-l2.png"))
    return written


def _save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
