"""Time the simulator: requests replayed per second per strategy, and how the cost grows with trace length and
replica count. Prints (or writes) a Markdown section for docs/benchmarks.md.

    python -m tools.benchsim [--trace FILE] [--repeat 3] [--output FILE]

The simulator is single-threaded, so this measures one core: CPU time of this process (`time.process_time`), which
a busy machine disturbs less than the wall clock. Each point is the best of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kvtier.planner.model import TierModel
from kvtier.simulate.engine import SimConfig, simulate
from kvtier.simulate.routers import STRATEGIES
from kvtier.simulate.trace import UnitTrace, to_units
from kvtier.trace import Trace, TraceError, TraceRequest, load_trace
from tools.benchdoc import write_section

# The sample trace shipped in the repository (examples/traces/README.md: source, commit, licence).
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "examples" / "traces" / "mooncake_synthetic_500.jsonl"
# Hand-set, Qwen3-8B-on-L40S-like sizes; speed depends on the work per request, not on these values. No length
# cap, so every request is looked up, routed and stored (the worst case).
MODEL = TierModel(
    kv_bytes_per_token=147_456,
    chunk_tokens=256,
    block_tokens=16,
    replicas=2,
    l0_tokens=160_000,
    l1_tokens=270_000,
    l2_tokens=1_350_000,
    l1_load_s_per_token=7e-6,
    l2_load_s_per_token=6e-5,
    prefill_s_per_token=9e-5,
    prefill_s_per_token_squared=1.6e-9,
    max_model_len=10**9,
)
LENGTHS = (0.25, 0.5, 1, 2, 4, 8)  # multiples of the trace
REPLICAS = (1, 2, 4, 8, 16)


def tiled(trace: Trace, factor: float) -> Trace:
    """The first part of the trace (factor < 1) or copies of it one after another with fresh block ids."""
    if factor <= 1:
        return Trace(trace.requests[: max(1, round(len(trace) * factor))], trace.block_tokens, trace.source)
    span = max(r.timestamp_ms for r in trace.requests) + 1000.0
    offset = max(max(r.hash_ids) for r in trace.requests) + 1
    copies = [
        TraceRequest(
            r.timestamp_ms + k * span, r.input_length, r.output_length, tuple(b + k * offset for b in r.hash_ids)
        )
        for k in range(round(factor))
        for r in trace.requests
    ]
    return Trace(tuple(copies), trace.block_tokens, trace.source)


def best_seconds(units: UnitTrace, model: TierModel, config: SimConfig, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        simulate(units, model, config)
        best = min(best, time.process_time() - started)
    return best


def measure(trace: Trace, repeat: int) -> str:
    def config(routing: str) -> SimConfig:
        return SimConfig(routing=routing, l2_max_age_s=24 * 3600.0, janitor_every_s=300.0)

    units = to_units(trace, MODEL.chunk_tokens)
    lines = [
        "## Simulator speed (`kvtier simulate`)",
        "",
        f"Measured with `python -m tools.benchsim` on {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs (the simulator uses one). "
        f"Trace: `{Path(trace.source).name}` ({len(trace):,} requests, "
        f"{sum(r.input_length for r in trace.requests) / len(trace):,.0f} prompt tokens on average). "
        f"Hand-set tiers: {MODEL.replicas} replicas, L0 {MODEL.l0_tokens:,}, L1 {MODEL.l1_tokens:,} tokens per "
        f"replica, L2 {MODEL.l2_tokens:,} tokens; no length cap, so every request is simulated. "
        f"CPU seconds, best of {repeat} runs; excludes loading the trace and Python start-up.",
        "",
        "| routing | seconds | requests/s | µs per request |",
        "|---|---:|---:|---:|",
    ]
    for routing in STRATEGIES:
        seconds = best_seconds(units, MODEL, config(routing), repeat)
        lines.append(f"| {routing} | {seconds:.3f} | {len(trace) / seconds:,.0f} | {1e6 * seconds / len(trace):,.1f} |")

    lines += ["", "Trace length (copies of the trace one after another, fresh block ids; 2 replicas), µs per request:"]
    lines += ["", "| requests | " + " | ".join(STRATEGIES) + " |", "|---:|" + "---:|" * len(STRATEGIES)]
    for factor in LENGTHS:
        longer = tiled(trace, factor)
        longer_units = to_units(longer, MODEL.chunk_tokens)
        cells = [f"{1e6 * best_seconds(longer_units, MODEL, config(s), repeat) / len(longer):.1f}" for s in STRATEGIES]
        lines.append(f"| {len(longer):,} | " + " | ".join(cells) + " |")

    lines += ["", f"Replica count (the {len(trace):,}-request trace), µs per request:"]
    lines += ["", "| replicas | " + " | ".join(STRATEGIES) + " |", "|---:|" + "---:|" * len(STRATEGIES)]
    for replicas in REPLICAS:
        model = dataclasses.replace(MODEL, replicas=replicas)
        cells = [f"{1e6 * best_seconds(units, model, config(s), repeat) / len(trace):.1f}" for s in STRATEGIES]
        lines.append(f"| {replicas} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchsim", description=__doc__)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help=f"Mooncake trace (default {DEFAULT_TRACE})")
    parser.add_argument("--repeat", type=int, default=3, help="runs per point; the best counts (default 3)")
    parser.add_argument("--output", type=Path, help="update this Markdown file's simulator section instead of printing")
    args = parser.parse_args(argv)
    try:
        trace = load_trace(args.trace)
    except TraceError as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return 2
    section = measure(trace, max(1, args.repeat))
    if args.output:
        write_section(args.output, "simulate", section)
    else:
        sys.stdout.write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
