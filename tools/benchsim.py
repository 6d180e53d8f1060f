"""Time the simulator: the whole `kvtier simulate` command per routing (what a user waits for), the replay alone,
and how time and memory grow with trace length and replica count. Prints (or writes) a Markdown section for
docs/benchmarks.md.

    python -m tools.benchsim [--trace FILE] [--repeat 5] [--output FILE]

Runs are interleaved (every routing once, then again) and each point is the median, with the load average printed
before and after: the machine may be shared. The replay is single-threaded; its times are CPU time of this process
(`time.process_time`), the command's are wall clock and CPU of the child.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

from kvtier.planner.model import TierModel
from kvtier.simulate.engine import SimConfig, simulate
from kvtier.simulate.routers import STRATEGIES
from kvtier.simulate.trace import UnitTrace, to_units
from kvtier.trace import Trace, TraceError, TraceRequest, load_trace
from tools.benchdoc import write_section

ROOT = Path(__file__).resolve().parents[1]
# The sample trace shipped in the repository (examples/traces/README.md: source, commit, licence); docs/benchmarks.md
# is measured on the whole Mooncake conversation trace (`make bench-sim SIM_TRACE=...`, the Makefile names it).
DEFAULT_TRACE = ROOT / "examples" / "traces" / "mooncake_synthetic.jsonl"
COMMAND_TIMEOUT_S = 600
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


def median_seconds(units: UnitTrace, model: TierModel, configs: Sequence[SimConfig], repeat: int) -> list[float]:
    """CPU seconds of each config's replay, median of `repeat` interleaved runs."""
    runs: list[list[float]] = [[] for _ in configs]
    for _ in range(repeat):
        for times, config in zip(runs, configs, strict=True):
            started = time.process_time()
            simulate(units, model, config)
            times.append(time.process_time() - started)
    return [statistics.median(times) for times in runs]


def peak_bytes(trace: Trace, config: SimConfig) -> int:
    """Peak Python memory of mapping and replaying `trace` (tracemalloc; a separate run, it slows the replay)."""
    tracemalloc.start()
    try:
        simulate(to_units(trace, MODEL.chunk_tokens), MODEL, config)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def command_seconds(trace_path: Path, routing: str) -> tuple[float, float]:
    """(wall, CPU) seconds of `kvtier simulate` on the shipped dev config's retail endpoint, one routing."""
    argv = [sys.executable, "-m", "kvtier", "simulate", "-e", "dev", "--lob", "retail", "--endpoint", "qwen3-8b"]
    argv += ["--trace", str(trace_path), "--routing", routing, "--no-plots", "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, timeout=COMMAND_TIMEOUT_S)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(trace: Trace, trace_path: Path, repeat: int) -> str:
    def config(routing: str) -> SimConfig:
        return SimConfig(routing=routing, l2_max_age_s=24 * 3600.0, janitor_every_s=300.0)

    configs = [config(routing) for routing in STRATEGIES]
    load_before = load_average()
    units = to_units(trace, MODEL.chunk_tokens)
    lines = [
        "## Simulator speed (`kvtier simulate`)",
        "",
        f"Measured with `python -m tools.benchsim` on {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs (the simulator uses one). "
        f"Trace: `{Path(trace.source).name}` ({len(trace):,} requests, "
        f"{sum(r.input_length for r in trace.requests) / len(trace):,.0f} prompt tokens on average). "
        f"Medians of {repeat} interleaved runs. Load average (1 / 5 / 15 min) before: {load_before}.",
        "",
        "The whole command, `kvtier simulate -e dev --lob retail --endpoint qwen3-8b --trace <trace> --routing R "
        "--no-plots --json` (Python start-up, config, reading the trace, the replay with L2, the report):",
        "",
        "| routing | wall s | CPU s | requests/s (wall) |",
        "|---|---:|---:|---:|",
    ]
    runs: dict[str, list[tuple[float, float]]] = {routing: [] for routing in STRATEGIES}
    for _ in range(repeat):
        for routing in STRATEGIES:
            runs[routing].append(command_seconds(trace_path, routing))
    for name, pairs in runs.items():
        wall = statistics.median(w for w, _ in pairs)
        cpu = statistics.median(c for _, c in pairs)
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {len(trace) / wall:,.0f} |")

    lines += [
        "",
        f"The replay alone (hand-set tiers: {MODEL.replicas} replicas, L0 {MODEL.l0_tokens:,}, L1 "
        f"{MODEL.l1_tokens:,} tokens per replica, L2 {MODEL.l2_tokens:,} tokens; no length cap, so every request is "
        "simulated), CPU seconds:",
        "",
        "| routing | seconds | requests/s | µs per request |",
        "|---|---:|---:|---:|",
    ]
    for routing, seconds in zip(STRATEGIES, median_seconds(units, MODEL, configs, repeat), strict=True):
        lines.append(f"| {routing} | {seconds:.3f} | {len(trace) / seconds:,.0f} | {1e6 * seconds / len(trace):,.1f} |")

    lines += [
        "",
        "Trace length (copies of the trace one after another, fresh block ids; 2 replicas): µs per request, and peak "
        "memory of the mapping and replay (roundrobin) in bytes per request:",
        "",
        "| requests | " + " | ".join(STRATEGIES) + " | bytes per request |",
        "|---:|" + "---:|" * (len(STRATEGIES) + 1),
    ]
    for factor in LENGTHS:
        longer = tiled(trace, factor)
        longer_units = to_units(longer, MODEL.chunk_tokens)
        times = median_seconds(longer_units, MODEL, configs, repeat)
        cells = [f"{1e6 * seconds / len(longer):.1f}" for seconds in times]
        memory = peak_bytes(longer, configs[0]) / len(longer)
        lines.append(f"| {len(longer):,} | " + " | ".join(cells) + f" | {memory:,.0f} |")

    lines += ["", f"Replica count (the {len(trace):,}-request trace), µs per request:"]
    lines += ["", "| replicas | " + " | ".join(STRATEGIES) + " |", "|---:|" + "---:|" * len(STRATEGIES)]
    for replicas in REPLICAS:
        model = dataclasses.replace(MODEL, replicas=replicas)
        cells = [f"{1e6 * seconds / len(trace):.1f}" for seconds in median_seconds(units, model, configs, repeat)]
        lines.append(f"| {replicas} | " + " | ".join(cells) + " |")
    lines += ["", f"Load average after: {load_average()}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchsim", description=__doc__)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help=f"Mooncake trace (default {DEFAULT_TRACE})")
    parser.add_argument(
        "--repeat", type=int, default=5, help="interleaved runs per point; the median counts (default 5)"
    )
    parser.add_argument("--output", type=Path, help="update this Markdown file's simulator section instead of printing")
    args = parser.parse_args(argv)
    try:
        trace = load_trace(args.trace)
    except TraceError as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return 2
    section = measure(trace, args.trace, max(1, args.repeat))
    if args.output:
        write_section(args.output, "simulate", section)
    else:
        sys.stdout.write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
