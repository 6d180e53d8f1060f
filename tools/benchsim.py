"""Time the simulator: the whole `kvtier simulate` command per routing (what a user waits for), the replay alone,
and how time and memory grow with trace length and replica count. Prints (or writes) a Markdown section for
docs/benchmarks.md.

    python -m tools.benchsim [--trace FILE] [--repeat 5] [--output FILE]
    python -m tools.benchsim --trace FILE --scale 360930 1000000 [--repeat 1] [--output FILE]

Runs are interleaved (every routing once, then again) and each point is the median, with the load average printed
before and after: the machine may be shared. The replay is single-threaded; its times are CPU time of this process
(`time.process_time`), the command's are wall clock and CPU of the child.

`--scale`: production-size traces (issue 40), copies of FILE one after another with fresh block ids, cut at each
request count, written to a scratch folder. At each size, for unbounded tiers and for the deployment's, the whole
`kvtier simulate` process per routing (and all routings in one run: one parse) against the bare replay of the same
trace (tools/barereplay.py: the same hit rule and nothing else): wall and CPU seconds and peak RSS of each process
(`os.wait4`), and their ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Sequence
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


# ---- production-size traces (issue 40) ---------------------------------------------------------------------------
SCALE_ENDPOINT = ("dev", "retail", "qwen3-8b")  # the shipped dev config's endpoint, as `measure` runs it
SCALE_REPLICAS = 4  # as issue 40 measured
UNBOUNDED = ("--l1-gib", "1e9", "--l2-gb", "1e9")  # an exabyte-scale L1 and L2: nothing is ever evicted
GOAL_TIME, GOAL_MEMORY = 2.0, 1.5
BASELINE = f"{STRATEGIES[0]}, --baseline checkout"  # the same command from another commit (before issue 40)


@dataclasses.dataclass(frozen=True)
class Cost:
    """What one process took: wall and CPU seconds, peak resident memory in bytes."""

    wall_s: float
    cpu_s: float
    peak_bytes: int


def write_scaled(source: Path, requests: int, out: Path) -> int:
    """Copies of the trace at `source` one after another (each later by the trace's span plus a second, its block
    ids shifted past every earlier id), cut at `requests` lines, written to `out` one line at a time; the lines
    written."""
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    span = max(row["timestamp"] for row in rows) + 1000
    offset = max(max(row["hash_ids"]) for row in rows) + 1
    written = 0
    with out.open("w", encoding="utf-8") as handle:
        for copy in _copies():
            for row in rows:
                if written >= requests:
                    return written
                shifted = row | {
                    "timestamp": row["timestamp"] + copy * span,
                    "hash_ids": [block + copy * offset for block in row["hash_ids"]],
                }
                handle.write(json.dumps(shifted) + "\n")
                written += 1
    return written  # pragma: no cover (the loop over copies never ends)


def _copies() -> Iterator[int]:
    copy = 0
    while True:
        yield copy
        copy += 1


def process_cost(argv: Sequence[str], source: Path | None = None) -> Cost:
    """Run `python -m MODULE ARGS` (`argv`: the module and its arguments) to its end, output discarded and exit 0
    required, and measure that process alone: wall, CPU (`os.wait4`) and peak memory (tools/peakrss.py says why not
    from `wait4`). `source`: import the module from that checkout instead (another commit's kvtier)."""
    with tempfile.TemporaryDirectory(prefix="benchsim-run-") as folder:
        peak, errors = Path(folder) / "peak", Path(folder) / "stderr"
        with errors.open("wb") as stderr:
            started = time.perf_counter()
            command = [sys.executable, str(ROOT / "tools" / "peakrss.py"), str(peak), *argv]
            env = os.environ | {"PYTHONPATH": str(source or ROOT)}
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=source or ROOT, env=env)
            try:
                _, status, usage = os.wait4(process.pid, 0)
            except BaseException:
                process.kill()
                process.wait()
                raise
            wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            tail = errors.read_text(encoding="utf-8", errors="replace")[-400:]
            raise RuntimeError(f"python -m {' '.join(argv[:2])} exited {process.returncode}: {tail}")
        return Cost(wall, usage.ru_utime + usage.ru_stime, int(peak.read_text(encoding="ascii")))


def bare_argv(trace: Path, model: TierModel, *, unbounded: bool, max_age_s: float) -> list[str]:
    """tools/barereplay.py with the tiers of `model` in 512-token blocks (the simulator's unit at chunk 256)."""
    unit = 512
    argv = ["tools.barereplay", str(trace), "--replicas", str(model.replicas)]
    argv += ["--l0-units", str(model.l0_tokens // unit), "--max-model-len", str(model.max_model_len)]
    argv += ["--max-age-s", repr(max_age_s)]
    if not unbounded:
        argv += ["--l1-units", str(model.l1_tokens // unit), "--l2-units", str(model.l2_tokens // unit)]
    return argv


def kvtier_argv(trace: Path, routings: Sequence[str], *, unbounded: bool) -> list[str]:
    env, lob, endpoint = SCALE_ENDPOINT
    argv = ["kvtier", "simulate", "-e", env, "--lob", lob, "--endpoint", endpoint]
    argv += ["--trace", str(trace), "--replicas", str(SCALE_REPLICAS), "--routing", *routings, "--no-plots", "--json"]
    return argv + (list(UNBOUNDED) if unbounded else [])


def scale_model() -> tuple[TierModel, float]:
    """The deployment's tier model for SCALE_REPLICAS replicas and its LOB's L2 max age in seconds."""
    from kvtier.planner.tiers import tier_model
    from kvtier.rules import load_checked

    env, lob, endpoint = SCALE_ENDPOINT
    config = load_checked(ROOT / "config", env)
    age = next(item.l2.max_age_hours for item in config.lobs if item.name == lob) * 3600.0
    return tier_model(config, lob, endpoint, replicas=SCALE_REPLICAS), age


def ratio_cell(value: float, goal: float) -> str:
    return f"{value:.2f}x" if value <= goal else f"**{value:.2f}x**"


def median_cost(costs: Sequence[Cost]) -> Cost:
    return Cost(
        statistics.median(c.wall_s for c in costs),
        statistics.median(c.cpu_s for c in costs),
        int(statistics.median(c.peak_bytes for c in costs)),
    )


def measure_scale(source: Path, sizes: Sequence[int], repeat: int, scratch: Path, baseline: Path | None = None) -> str:
    model, age = scale_model()
    load_before = load_average()
    lines = [
        "## Simulator at production scale (issue 40)",
        "",
        f"Measured with `python -m tools.benchsim --scale` on {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs shared with other work (load "
        f"average before: {load_before}). Traces: copies of `{source.name}` one after another with fresh block ids, "
        f"cut at each size. `kvtier simulate -e {SCALE_ENDPOINT[0]} --lob {SCALE_ENDPOINT[1]} --endpoint "
        f"{SCALE_ENDPOINT[2]} --replicas {SCALE_REPLICAS} --routing R --no-plots --json`, the whole process, against "
        "the bare replay (`python -m tools.barereplay`: one `json.loads` a line and the simulator's hit rule over the "
        "same tiers, nothing else). Unbounded: `--l1-gib 1e9 --l2-gb 1e9` (L0 stays the GPU's "
        f"{model.l0_tokens:,} tokens; L2 still ages out after {age / 3600:g} h); bounded: the deployment's tiers (L1 "
        f"{model.l1_tokens:,}, L2 {model.l2_tokens:,} tokens). Ratios are kvtier over the bare replay, wall "
        f"(CPU) time and peak RSS; goal at most {GOAL_TIME:g}x time and {GOAL_MEMORY:g}x memory (bold: above). "
        f"Medians of {repeat} interleaved run(s).",
        "",
        "| requests | tiers | routing | kvtier wall s | CPU s | peak MiB | bare wall s | CPU s | peak MiB "
        "| time ratio | memory ratio |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        trace = scratch / f"scaled-{size}.jsonl"
        write_scaled(source, size, trace)
        for unbounded in (True, False):
            runs: dict[str, list[Cost]] = {"bare": []}
            groups = [(r,) for r in STRATEGIES] + [tuple(STRATEGIES)]
            for group in groups:
                runs[" ".join(group)] = []
            if baseline is not None:
                runs[BASELINE] = []
            for _ in range(repeat):
                runs["bare"].append(process_cost(bare_argv(trace, model, unbounded=unbounded, max_age_s=age)))
                for group in groups:
                    runs[" ".join(group)].append(process_cost(kvtier_argv(trace, group, unbounded=unbounded)))
                if baseline is not None:
                    argv = kvtier_argv(trace, [STRATEGIES[0]], unbounded=unbounded)
                    runs[BASELINE].append(process_cost(argv, baseline))
            bare = median_cost(runs.pop("bare"))
            for label, costs in runs.items():
                cost = median_cost(costs)
                name = "all five, one run" if " " in label else label
                time_ratio = f"{ratio_cell(cost.wall_s / bare.wall_s, GOAL_TIME)} ({cost.cpu_s / bare.cpu_s:.2f}x)"
                lines.append(
                    f"| {size:,} | {'unbounded' if unbounded else 'bounded'} | {name} | {cost.wall_s:.1f} | "
                    f"{cost.cpu_s:.1f} | {cost.peak_bytes / 2**20:,.0f} | {bare.wall_s:.1f} | {bare.cpu_s:.1f} | "
                    f"{bare.peak_bytes / 2**20:,.0f} | {time_ratio} | "
                    f"{ratio_cell(cost.peak_bytes / bare.peak_bytes, GOAL_MEMORY)} |"
                )
        trace.unlink()
    lines += ["", f"Load average after: {load_average()}."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchsim", description=__doc__)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help=f"Mooncake trace (default {DEFAULT_TRACE})")
    parser.add_argument(
        "--repeat", type=int, default=5, help="interleaved runs per point; the median counts (default 5)"
    )
    parser.add_argument("--output", type=Path, help="update this Markdown file's simulator section instead of printing")
    parser.add_argument(
        "--scale",
        type=int,
        nargs="+",
        metavar="REQUESTS",
        help="measure the whole process against the bare replay on traces of these sizes (copies of --trace)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="with --scale: also time roundrobin from this checkout of kvtier (e.g. `git archive` of an older commit)",
    )
    args = parser.parse_args(argv)
    if args.scale:
        if min(args.scale) < 1:
            parser.error(f"--scale {' '.join(map(str, args.scale))}: give request counts of 1 or more")
        with tempfile.TemporaryDirectory(prefix="benchsim-") as scratch:
            section = measure_scale(args.trace, args.scale, max(1, args.repeat), Path(scratch), args.baseline)
        if args.output:
            write_section(args.output, "simulate-scale", section)
        else:
            sys.stdout.write(section)
        return 0
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
