"""The elasticity report: per min replicas, GPU-hours and TTFT with and without the shared L2 (table, lines, JSON)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich.table import Table

from kvtier.simulate.elastic import ElasticResult


@dataclass(frozen=True)
class ElasticRow:
    """One replay: the min replicas it started from, whether the shared L2 was on, and what came out."""

    min_replicas: int
    l2: bool
    run: ElasticResult


def table(rows: Sequence[ElasticRow]) -> Table:
    out = Table(title="Autoscaled replay: GPU-hours and TTFT (seconds)", title_justify="left")
    for name in ("min", "L2", "GPU-h", "peak", "added", "p50", "p90", "p99"):
        out.add_column(name, justify="left" if name == "L2" else "right")
    for row in rows:
        ttft = row.run.result.ttft_s
        out.add_row(
            str(row.min_replicas),
            "on" if row.l2 else "off",
            f"{row.run.gpu_hours:,.2f}",
            str(row.run.peak_replicas),
            str(row.run.scale_ups),
            *(f"{ttft[q]:.2f}" for q in ("p50", "p90", "p99")),
        )
    out.caption = (
        "GPU-h: GPUs held from the first arrival to the last prefill; peak: most replicas holding GPUs; "
        "added: replicas the autoscaler started."
    )
    return out


def policy_line(rows: Sequence[ElasticRow], gpus_per_replica: int) -> str:
    policy = rows[0].run.policy
    return (
        f"autoscaler: max {policy.max_replicas} replicas ({gpus_per_replica} GPU each), target "
        f"{policy.target_inflight:g} requests in flight per replica, polling {policy.polling_s:g} s, scale-down "
        f"window {policy.cooldown_s:g} s, start-up {policy.startup_s:g} s; new replicas start with empty L0 and L1"
    )


def comparison_lines(rows: Sequence[ElasticRow]) -> list[str]:
    """Per min replicas: GPU-hours and TTFT p90 with the shared L2 against without it, and what the new replicas'
    first requests read from L2."""
    pairs: dict[int, dict[bool, ElasticResult]] = {}
    for row in rows:
        pairs.setdefault(row.min_replicas, {})[row.l2] = row.run
    lines = []
    for low, runs in pairs.items():
        on, off = runs.get(True), runs.get(False)
        if on is None or off is None:
            continue
        change = round(100 * (on.gpu_hours - off.gpu_hours) / off.gpu_hours) if off.gpu_hours else 0
        lines.append(
            f"min {low}: with the shared L2 {on.gpu_hours:,.2f} GPU-hours ({f'{change:+d}%' if change else 'same'}) "
            "and TTFT p90 "
            f"{on.result.ttft_s['p90']:.2f} s, without it {off.gpu_hours:,.2f} and {off.result.ttft_s['p90']:.2f} s; "
            f"{_first_reads(on)}"
        )
    return lines


def _first_reads(run: ElasticResult) -> str:
    firsts = [n.first for n in run.new_replicas if n.first is not None]
    if not firsts:
        return "no new replica served"
    prompt = sum(f.total for f in firsts)
    from_l2 = sum(f.l2_same + f.l2_other for f in firsts)
    return (
        f"the first requests of {len(firsts)} new replica{'s' if len(firsts) > 1 else ''} read {from_l2 / prompt:.0%} "
        "of their prompt tokens from L2"
    )


def json_rows(rows: Sequence[ElasticRow]) -> list[dict[str, Any]]:
    """Every figure of the table plus the timeline; each request's TTFT stays out (the plot shows them)."""
    out = []
    for row in rows:
        run = row.run
        out.append(
            {
                "min_replicas": row.min_replicas,
                "l2": row.l2,
                "gpu_hours": run.gpu_hours,
                "peak_replicas": run.peak_replicas,
                "scale_ups": run.scale_ups,
                "scale_downs": run.scale_downs,
                "ttft_s": run.result.ttft_s,
                "hit_rates": run.result.hit_rates,
                "served": run.result.served,
                "skipped": run.result.skipped,
                "policy": asdict(run.policy),
                "new_replicas": [asdict(n) for n in run.new_replicas],
                "timeline": [{"t_s": t, "ready": ready, "holding": holding} for t, ready, holding in run.timeline],
            }
        )
    return out
