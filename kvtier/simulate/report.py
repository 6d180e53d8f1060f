"""Tables (rich), warnings and JSON for simulation results. Units: L1 in GiB (LMCache's unit, `cache.l1_gb`), L2 in
decimal GB (`l2.budget_gb`), everywhere: flags, headers, JSON keys."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table

from kvtier.catalog import GB, GIB
from kvtier.planner.model import TierModel
from kvtier.simulate.result import SimResult

# Sweep dimensions: result.extra key, column header, how a size is written.
SWEEPS = {"l1_gib": ("L1 GiB", "GiB"), "l2_gb": ("L2 GB", "GB")}
SIZING_POINTS = 0.01  # "within 1 point of the best hit rate"
# Warn when one replica serves more than half of the requests, and at least 20% more than an even share (so two
# replicas splitting 51/49 do not warn).
CROWDED_SHARE = 0.5
CROWDED_OVER_EVEN = 1.2
FIXES = {
    "prefixaware": "a prompt whose first block any replica saw follows it, with no minimum match (as upstream); "
    "set --prefix-min-match TOKENS (production-stack's prefixMinMatchLength) so short matches go to the "
    "least-loaded replica",
    "kvaware": "matches within --kv-aware-threshold of the prompt follow the cache; lower --kv-aware-threshold",
    "session": "the trace's sessions hash unevenly onto the replicas; no flag changes that",
    "roundrobin": "round-robin cannot be uneven; check --replicas",
    "poolaware": "the expected TTFT favoured the replicas holding the prefix locally; the queue estimate balances "
    "them once their wait exceeds an L2 load",
}


def gigabytes(tokens: int, model: TierModel) -> float:
    """Decimal GB, the unit of the L2 budget."""
    return tokens * model.kv_bytes_per_token / GB


def gibibytes(tokens: int, model: TierModel) -> float:
    """GiB, the unit of L1 (LMCache's `max_local_cpu_size`)."""
    return tokens * model.kv_bytes_per_token / GIB


def swept(results: Sequence[SimResult]) -> list[str]:
    """The sweep dimensions (extra keys) that take more than one value, in SWEEPS order."""
    return [key for key in SWEEPS if len({r.extra.get(key) for r in results}) > 1]


def header(model: TierModel, title: str, unit_tokens: int, dims: Sequence[str] = ()) -> str:
    l0 = f"{model.l0_tokens:,} tokens ({gibibytes(model.l0_tokens, model):,.1f} GiB)"
    l1 = "swept" if "l1_gib" in dims else f"{model.l1_tokens:,} tokens ({gibibytes(model.l1_tokens, model):,.1f} GiB)"
    l2 = "swept" if "l2_gb" in dims else f"{model.l2_tokens:,} tokens ({gigabytes(model.l2_tokens, model):,.1f} GB)"
    even = model.l2_break_even_tokens()
    if not model.has_l2:
        beats = "no L2"
    elif even is None:
        beats = "an L2 hit never beats recomputing"
    else:
        beats = f"an L2 hit beats recomputing from {even:,} tokens"
    return (
        f"{title}\n"
        f"replicas {model.replicas}; per replica L0 {l0}, L1 {l1}; L2 shared {l2}\n"
        f"unit {unit_tokens} tokens ({model.chunk_unit} {model.chunk_tokens}); max_model_len {model.max_model_len:,}; "
        f"{beats}"
    )


def skipped_line(result: SimResult, max_model_len: int) -> str | None:
    if not result.skipped:
        return None
    return (
        f"skipped {result.skipped:,} of {result.requests:,} requests ({result.skipped / result.requests:.1%}), "
        f"holding {result.skipped_token_share:.1%} of the trace's prompt tokens: longer than max_model_len "
        f"{max_model_len:,}; hit rates and TTFT cover the served requests only"
    )


def _labels(result: SimResult, dims: Sequence[str], replicas: bool) -> list[str]:
    name = result.routing
    row = [name]
    if replicas:
        row.append(str(result.replicas))
    row += [f"{float(result.extra.get(key, 0.0)):,.0f}" for key in dims]
    return row


def tables(results: Sequence[SimResult], configured: str | None = None) -> tuple[Table, Table]:
    """Hit rates, then TTFT and load: two tables of short columns, so each fits 80 columns."""
    dims = swept(results)
    replicas = len({r.replicas for r in results}) > 1
    hits = Table(title="Token hit rate per tier (share of served prompt tokens)", title_justify="left")
    times = Table(title="TTFT (seconds) and load balance", title_justify="left")
    for out in (hits, times):
        out.add_column("routing")
        if replicas:
            out.add_column("replicas", justify="right")
        for key in dims:
            out.add_column(SWEEPS[key][0], justify="right")
    for name in ("served", "L0", "L1", "L2 own", "L2 peer", "all"):
        hits.add_column(name, justify="right")
    for name in ("p50", "p90", "p99", "req/replica", "busy"):
        times.add_column(name, justify="right")
    for result in results:
        labels = _labels(result, dims, replicas)
        if result.routing == configured:
            labels[0] += "*"
        rates = result.hit_rates
        hits.add_row(
            *labels, f"{result.served:,}", *(f"{rates[t]:.1%}" for t in ("l0", "l1", "l2_same", "l2_other", "total"))
        )
        times.add_row(
            *labels,
            *(f"{result.ttft_s[q]:.2f}" for q in ("p50", "p90", "p99")),
            _per_replica(result),
            f"{result.balance['busy']:.2f}",
        )
    star = "*: the endpoint's configured routing. " if configured else ""
    hits.caption = star + "L2 own/peer: chunks this replica / another replica wrote."
    times.caption = "req/replica: requests each replica served (min-max above 4); busy: max/mean busy time."
    return hits, times


def crowding_warnings(results: Sequence[SimResult]) -> list[str]:
    """One warning per strategy whose busiest replica served more than half of the requests (well above even)."""
    worst: dict[str, SimResult] = {}
    for result in results:
        share = result.busiest_share
        crowded = result.replicas > 1 and share > CROWDED_SHARE and share >= CROWDED_OVER_EVEN / result.replicas
        if crowded and (result.routing not in worst or result.busiest_share > worst[result.routing].busiest_share):
            worst[result.routing] = result
    return [
        f"warning: {routing} sent {r.busiest_share:.0%} of the requests to one of {r.replicas} replicas: "
        f"{FIXES[routing]}"
        for routing, r in worst.items()
    ]


def sizing(results: Sequence[SimResult]) -> list[dict[str, Any]]:
    """Per strategy and swept size: the smallest size within 1 point of the best hit rate."""
    answers = []
    for key in swept(results):
        for routing in dict.fromkeys(r.routing for r in results):
            runs = sorted((r for r in results if r.routing == routing), key=lambda r: float(r.extra.get(key, 0.0)))
            best = max(runs, key=lambda r: r.hit_rate())
            enough = next(r for r in runs if r.hit_rate() >= best.hit_rate() - SIZING_POINTS)
            answers.append(
                {
                    "routing": routing,
                    "size": key,
                    "smallest": float(enough.extra.get(key, 0.0)),
                    "smallest_hit_rate": enough.hit_rate(),
                    "best": float(best.extra.get(key, 0.0)),
                    "best_hit_rate": best.hit_rate(),
                }
            )
    return answers


def sizing_lines(answers: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for a in answers:
        unit = SWEEPS[a["size"]][1]
        lines.append(
            f"{SWEEPS[a['size']][0].split()[0]} sizing ({a['routing']}): {a['smallest']:,g} {unit} reaches "
            f"{a['smallest_hit_rate']:.1%}, within 1 point of the best ({a['best_hit_rate']:.1%} at "
            f"{a['best']:,g} {unit})"
        )
    return lines


def notes(results: Sequence[SimResult], model: TierModel) -> list[str]:
    """Everything printed after the tables: skipped share, crowding warnings, sizing answers, L2 overshoot."""
    lines = []
    skipped = skipped_line(results[0], model.max_model_len) if results else None
    if skipped:
        lines.append(skipped)
    lines += crowding_warnings(results)
    lines += sizing_lines(sizing(results))
    over = [r for r in results if r.l2_peak_units * r.unit_tokens > r.l2_tokens > 0]
    if over:
        worst = max(over, key=lambda r: r.l2_peak_units * r.unit_tokens / r.l2_tokens)
        peak = gigabytes(worst.l2_peak_units * worst.unit_tokens, model)
        lines.append(
            f"L2 held up to {peak:,.0f} GB between janitor sweeps against a budget of "
            f"{gigabytes(worst.l2_tokens, model):,.0f} GB ({worst.routing}): Curvine must have that room, or writes "
            "fail; --janitor-every 0 shows the hit rate if the budget held at every write."
        )
    return lines


def print_report(console: Console, title: str, model: TierModel, results: Sequence[SimResult], configured: str) -> None:
    dims = swept(results)
    console.print(header(model, title, results[0].unit_tokens if results else model.chunk_tokens, dims))
    for out in tables(results, configured):
        console.print(out)
    for line in notes(results, model):
        console.print(line, highlight=False, markup=False)
    for line in adapter_lines(results):
        console.print(line, highlight=False, markup=False)


def adapter_lines(results: Sequence[SimResult]) -> list[str]:
    """Hit rate per LoRA adapter (issue 35), one line per run, when the trace names adapters."""
    lines: list[str] = []
    for result in results:
        if not result.per_adapter:
            continue
        parts = [
            f"{name} {rates['total']:.1%} ({result.per_adapter[name].total:,} tokens)"
            for name, rates in result.adapter_hit_rates().items()
        ]
        lines.append(f"hit rate per adapter, {result.routing}: " + ", ".join(parts))
    return lines


def json_report(
    context: dict[str, Any], model: TierModel, results: Sequence[SimResult], plots: Sequence[str]
) -> dict[str, Any]:
    return {
        **context,
        "units": {"l1": "GiB", "l2": "GB", "ttft": "s"},
        "tier_model": asdict(model),
        "l2_break_even_tokens": model.l2_break_even_tokens(),
        "results": [r.to_dict() for r in results],
        "warnings": crowding_warnings(results),
        "sizing": sizing(results),
        "plots": list(plots),
    }


def _per_replica(result: SimResult) -> str:
    counts = [p.requests for p in result.per_replica]
    if len(counts) <= 4:
        return "/".join(f"{c:,}" for c in counts)
    return f"{min(counts):,}-{max(counts):,}"
