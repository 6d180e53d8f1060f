"""Tables (rich) and JSON for simulation results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from kvtier.catalog import GB, GIB
from kvtier.planner.model import TierModel
from kvtier.simulate.result import SimResult


def gigabytes(tokens: int, model: TierModel) -> float:
    """Decimal GB, the unit of the L2 budget (L1 is in GiB, LMCache's unit, as the planner shows it)."""
    return tokens * model.kv_bytes_per_token / GB


def header(model: TierModel, title: str, unit_tokens: int, l2_swept: bool = False) -> str:
    def tier(tokens: int, binary: bool = False) -> str:
        if binary:
            return f"{tokens:,} tokens ({tokens * model.kv_bytes_per_token / GIB:,.1f} GiB)"
        return f"{tokens:,} tokens ({gigabytes(tokens, model):,.1f} GB)"

    l2 = "swept (see the table)" if l2_swept else tier(model.l2_tokens)
    return (
        f"{title}\n"
        f"replicas {model.replicas}; per replica L0 {tier(model.l0_tokens, True)}, L1 {tier(model.l1_tokens, True)}; "
        f"L2 shared {l2}; unit {unit_tokens} tokens (LMCache chunk {model.chunk_tokens}); "
        f"max_model_len {model.max_model_len:,}"
    )


def table(results: Sequence[SimResult], configured: str | None = None) -> Table:
    sweep = len({r.l2_tokens for r in results}) > 1 or len({r.replicas for r in results}) > 1
    out = Table(title="Token hit rate per tier, TTFT and load balance", title_justify="left")
    out.add_column("routing")
    if sweep:
        out.add_column("replicas", justify="right")
        out.add_column("L2 GB", justify="right")
    out.add_column("served", justify="right")
    out.add_column("skipped", justify="right")
    for name in ("L0", "L1", "L2 own", "L2 peer", "all tiers"):
        out.add_column(name, justify="right")
    for name in ("TTFT p50", "p90", "p99"):
        out.add_column(name, justify="right")
    out.add_column("requests/replica", justify="right")
    out.add_column("busy max/mean", justify="right")
    for result in results:
        rates = result.hit_rates
        name = result.routing + ("*" if result.routing == configured else "")
        row = [name]
        if sweep:
            row += [str(result.replicas), f"{result.extra.get('l2_gb', 0.0):,.0f}"]
        row += [f"{result.served:,}", f"{result.skipped:,}"]
        row += [f"{rates[t]:.1%}" for t in ("l0", "l1", "l2_same", "l2_other", "total")]
        row += [f"{result.ttft_s[q]:.2f} s" for q in ("p50", "p90", "p99")]
        row += [_per_replica(result), f"{result.balance['busy']:.2f}"]
        out.add_row(*row)
    if configured:
        out.caption = "*: the endpoint's configured routing. L2 own/peer: chunks this replica / another one wrote."
    return out


def print_report(console: Console, title: str, model: TierModel, results: Sequence[SimResult], configured: str) -> None:
    swept = len({r.l2_tokens for r in results}) > 1
    console.print(header(model, title, results[0].unit_tokens if results else model.chunk_tokens, swept))
    console.print(table(results, configured))
    over = [r for r in results if r.l2_peak_units * r.unit_tokens > r.l2_tokens > 0]
    if over:
        worst = max(over, key=lambda r: r.l2_peak_units * r.unit_tokens / r.l2_tokens)
        peak = gigabytes(worst.l2_peak_units * worst.unit_tokens, model)
        console.print(
            f"L2 held up to {peak:,.0f} GB between janitor sweeps against a budget of "
            f"{gigabytes(worst.l2_tokens, model):,.0f} GB ({worst.routing}): Curvine must have that room, or writes "
            "fail; --janitor-every 0 shows the hit rate if the budget held at every write."
        )


def json_report(
    context: dict[str, Any], model: TierModel, results: Sequence[SimResult], plots: Sequence[str]
) -> dict[str, Any]:
    return {**context, "tier_model": asdict(model), "results": [r.to_dict() for r in results], "plots": list(plots)}


def _per_replica(result: SimResult) -> str:
    counts = [p.requests for p in result.per_replica]
    if len(counts) <= 4:
        return "/".join(f"{c:,}" for c in counts)
    return f"{min(counts):,}-{max(counts):,}"
