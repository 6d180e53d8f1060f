"""`kvtier simulate`: replay a request trace through an endpoint's replicas, cache tiers and routers, and predict
the token hit rate of each tier and the TTFT that follows, before deploying it.

Capacities, bandwidths and prefill speed come from the planner (the same TierModel `kvtier plan` uses); the trace
is Mooncake-format JSONL (timestamp ms, input_length, output_length, hash_ids of 512-token blocks).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import math
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtier.cli import simulate_elastic
from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json
from kvtier.errors import ExitCode, UsageError, name_list
from kvtier.serving import KV_AWARE_THRESHOLD
from kvtier.simulate.engine import JANITOR_EVERY_S
from kvtier.simulate.routers import STRATEGIES

if TYPE_CHECKING:
    from kvtier.config.endpoint import Endpoint
    from kvtier.config.loader import Config
    from kvtier.config.lob import LineOfBusiness
    from kvtier.planner.model import TierModel
    from kvtier.planner.pool_routing import CacheAwareKnobs
    from kvtier.simulate.engine import SimConfig
    from kvtier.simulate.result import SimResult

    TierModelFunction = Callable[..., TierModel]

PROGRESS_MIN_REQUESTS = 10_000  # show a progress bar when this many requests are replayed in all
PROGRESS_MIN_BYTES = 8 << 20  # and while reading a trace file at least this large
DEFAULT_OUT = Path("out") / "simulate"
NARROW = 80  # the report fits 80 columns (a terminal narrower than that keeps its own width)
# The simulator keeps every replica's L0 and L1 in memory; far beyond any endpoint (the example config runs 2), and
# a typo's 10**9 would exhaust memory instead of answering.
MAX_REPLICAS = 1024


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="replay a trace through an endpoint's tiers and routers; predict hit rates and TTFT",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_options(parser)
    parser.add_argument("--lob", help="line of business (default: the only one of the environment)")
    parser.add_argument("--endpoint", help="endpoint of the LOB (default: its only one)")
    parser.add_argument("--trace", required=True, type=Path, help="Mooncake-format JSONL trace")
    parser.add_argument(
        "--routing",
        nargs="+",
        choices=STRATEGIES,
        metavar="STRATEGY",
        help=f"one or more of {', '.join(STRATEGIES)} (default: all)",
    )
    parser.add_argument("--limit", type=int, help="replay only the first N requests of the trace")
    parser.add_argument("--replicas", type=int, help=f"replicas, 1 to {MAX_REPLICAS} (default: the endpoint's)")
    parser.add_argument(
        "--l1-gib",
        type=float,
        nargs="+",
        metavar="GIB",
        help="L1 CPU DRAM per replica in GiB, LMCache's unit (default: cache.l1_gb, also GiB); several values sweep it",
    )
    parser.add_argument(
        "--l1-gb", type=float, nargs="+", help=argparse.SUPPRESS
    )  # the old name of --l1-gib (the value was always GiB): accepted with a deprecation note
    parser.add_argument(
        "--l2-gb",
        type=float,
        nargs="+",
        metavar="GB",
        help="L2 budget of the endpoint in decimal GB, like l2.budget_gb; several values sweep it",
    )
    parser.add_argument("--qps-scale", type=float, default=1.0, help="replay at this multiple of the trace's rate")
    parser.add_argument("--seed", type=int, default=0, help="seed of the routers' random tie-breaks (default 0)")
    parser.add_argument("--slots", type=int, default=1, help="prefills a replica runs at once (default 1)")
    parser.add_argument(
        "--janitor-every",
        type=float,
        default=JANITOR_EVERY_S,
        metavar="SECONDS",
        help=f"L2 janitor sweep period (default {JANITOR_EVERY_S:g}, the deployed janitor's; 0: at every write)",
    )
    parser.add_argument(
        "--prefix-min-match", type=int, default=0, metavar="TOKENS", help="prefixaware: least-loaded below this match"
    )
    parser.add_argument(
        "--kv-aware-threshold",
        type=int,
        default=KV_AWARE_THRESHOLD,
        metavar="TOKENS",
        help=f"kvaware fallback threshold (default {KV_AWARE_THRESHOLD}, the deployed router's)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"base folder for the plots (default {DEFAULT_OUT}/<env>/<lob>/<endpoint>); each run writes to its own "
        "subfolder <UTC time> in it",
    )
    parser.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    simulate_elastic.add_options(parser)
    add_json_option(parser)
    parser.set_defaults(func=run)


def _sim_config(
    args: argparse.Namespace, lob: LineOfBusiness, endpoint: Endpoint, model: TierModel, routing: str
) -> SimConfig:
    """One replay's settings from the flags, the endpoint's router and the LOB's janitor (fixed and elastic runs)."""
    from kvtier.simulate.engine import SimConfig

    return SimConfig(
        routing=routing,
        slots=args.slots,
        seed=args.seed,
        qps_scale=args.qps_scale,
        prefix_min_match_tokens=args.prefix_min_match,
        kv_aware_threshold=args.kv_aware_threshold,
        cache_aware=_cache_aware(endpoint, model, routing),
        **_l2_policy(endpoint, lob, args.janitor_every),
    )


def _cache_aware(endpoint: Endpoint, model: TierModel, routing: str) -> CacheAwareKnobs | None:
    """Standalone endpoints route with vllm-router's cache_aware: its defaults for prefixaware, the plan's knobs
    for poolaware (kvtier/planner/pool_routing.py); the simulator models what the LOB stack renders."""
    from kvtier.planner.pool_routing import ROUTER_DEFAULT_KNOBS, pool_aware_knobs

    if endpoint.mode != "standalone":
        return None
    if routing == "prefixaware":
        return ROUTER_DEFAULT_KNOBS
    if routing == "poolaware" and model.has_l2:
        return pool_aware_knobs(model, endpoint.bench.prefix_len, endpoint.bench.suffix_len)
    return None


def load_tier_model() -> TierModelFunction:
    """The planner's `tier_model(config, lob, endpoint, *, replicas, l1_gib, l2_gb)`, imported when the command runs."""
    from kvtier.planner.tiers import tier_model

    return tier_model


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from kvtier.simulate.report import gibibytes, gigabytes, json_report, print_report
    from kvtier.trace import load_trace

    _check_flags(args)
    config = load_from_args(args)
    lob, endpoint = _pick(config, args.lob, args.endpoint)
    err = Console(stderr=True)
    out = run_folder(args.out or DEFAULT_OUT / config.env.name / lob.name / endpoint.name)
    tier_model = load_tier_model()
    if args.autoscale:  # the autoscaler's replay needs the whole trace (its span) before it starts
        with _progress(err, _file_bytes(args.trace) >= PROGRESS_MIN_BYTES) as bar:
            reading = bar.add_task(f"reading {args.trace.name} (bytes)", total=_file_bytes(args.trace) or None)
            trace = load_trace(args.trace, limit=args.limit, progress=_advance(bar, reading, 0))
        _prepare_out(args, out)
        return simulate_elastic.run(
            args, config, lob, endpoint, trace, tier_model, out, lambda r, m: _sim_config(args, lob, endpoint, m, r),
            _console(),
        )  # fmt: skip
    strategies = list(dict.fromkeys(args.routing or STRATEGIES))
    runs: list[tuple[TierModel, SimConfig]] = []
    labels: list[dict[str, float]] = []

    def plan_runs() -> None:
        for l1_gib in args.l1_gib or [None]:
            for l2_gb in args.l2_gb or [None]:
                model = tier_model(config, lob.name, endpoint.name, replicas=args.replicas, l1_gib=l1_gib, l2_gb=l2_gb)
                sizes = {
                    "l1_gib": l1_gib if l1_gib is not None else gibibytes(model.l1_tokens, model),
                    "l2_gb": l2_gb if l2_gb is not None and model.has_l2 else gigabytes(model.l2_tokens, model),
                }
                for routing in strategies:
                    runs.append((model, _sim_config(args, lob, endpoint, model, routing)))
                    labels.append(sizes)

    results = [
        dataclasses.replace(result, extra=dict(sizes))
        for result, sizes in zip(_replay(args, err, plan_runs, runs, out), labels, strict=True)
    ]
    results.sort(key=lambda r: (strategies.index(r.routing), r.extra["l1_gib"], r.extra["l2_gb"]))  # stable
    requests = results[0].requests

    where = f"{config.env.name}/{lob.name}/{endpoint.name}"
    title = f"{where} on {args.trace.name} (x{args.qps_scale:g} rate, seed {args.seed})"
    plots: list[str] = []
    if not args.no_plots:
        from kvtier.simulate.plots import write_plots

        plots = [str(p) for p in write_plots(results, out, title)]
    # The header's model: the first with an L2 (a sweep may start at 0 GB), so its break-even is the endpoint's.
    first = next((model for model, _ in runs if model.has_l2), runs[0][0])
    if args.json:
        context = {
            "env": config.env.name,
            "lob": lob.name,
            "endpoint": endpoint.name,
            "configured_routing": endpoint.routing,
            "trace": {"path": str(args.trace), "requests": requests},
            "l2_max_age_hours": lob.l2.max_age_hours,
            "janitor_every_s": args.janitor_every,
            "out": str(out) if plots else None,
        }
        print_json(json_report(context, first, results, plots))
    else:
        out_console = _console()
        print_report(out_console, title, first, results, endpoint.routing)
        for plot in plots:
            out_console.print(f"wrote {plot}")
    if not any(r.served for r in results):
        print(f"kvtier simulate: every request is longer than max_model_len {first.max_model_len}", file=sys.stderr)
        return int(ExitCode.PROBLEMS)
    return int(ExitCode.OK)


def _replay(
    args: argparse.Namespace,
    err: Any,
    plan_runs: Callable[[], None],
    runs: list[tuple[TierModel, SimConfig]],
    out: Path,
) -> list[SimResult]:
    """Every run over one pass of the trace (kvtier/simulate/stream.py), in the order of `runs`; `plan_runs` fills
    `runs` once the trace's first line is known to be good and the plots' folder writable (a trace problem is said
    before a sizing one, as when the whole trace was read first). A regular file is streamed; a trace out of time order is read again and replayed
    sorted in memory, and so is one from a pipe, which cannot be read twice."""
    from itertools import chain

    from kvtier.simulate.stream import OutOfOrderError, replay_sorted, replay_stream, units_bound
    from kvtier.trace import read_rows

    size = _file_bytes(args.trace)
    regular = _is_regular(args.trace)
    with _progress(err, size >= PROGRESS_MIN_BYTES) as bar:  # from the first line read
        # Reading is replaying: one bar, in bytes of the trace; the reading task only names the file and unit.
        bar.add_task(f"reading {args.trace.name} (bytes)", total=size or None, visible=False)
        task = bar.add_task("simulating", total=size or None)
        rows = read_rows(args.trace, limit=args.limit, progress=_advance(bar, task, 0))
        first = next(rows)
        created = _prepare_out(args, out)
        try:
            plan_runs()
            if not regular:
                return replay_sorted(chain([first], rows), runs, source=str(args.trace))
            try:
                bound = units_bound(size)
                return replay_stream(chain([first], rows), runs, source=str(args.trace), max_units=bound)
            except OutOfOrderError:
                again = read_rows(args.trace, limit=args.limit, progress=_advance(bar, task, 0))
                return replay_sorted(again, runs, source=str(args.trace))
        except BaseException:
            if created:
                _remove_empty(out)  # no half-made run folder from a trace that failed half-way
            raise


def _prepare_out(args: argparse.Namespace, out: Path) -> bool:
    """Create and check the plots' folder before the replay (its plots must have somewhere to go); True if created."""
    if args.no_plots:
        return False
    from kvtier.cli.bench import prepare_out_dir

    return prepare_out_dir(out)


def _remove_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (a file someone put there) or gone: left as it is
        folder.rmdir()


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False  # read_rows says why


def _console() -> Any:
    """The report's console: at most NARROW columns on a terminal, exactly NARROW into a pipe or file."""
    from rich.console import Console

    return Console(width=min(Console().width, NARROW)) if sys.stdout.isatty() else Console(width=NARROW)


def _l2_policy(endpoint: Endpoint, lob: LineOfBusiness, janitor_every_s: float) -> dict[str, Any]:
    """Curvine L2 is kept by the LOB's janitor (age, then oldest down to 90% of the budget, every 30 seconds).
    HyperPod Tiered Storage evicts by itself, by a policy AWS does not document: modelled as oldest-first at the
    budget, no age limit."""
    if endpoint.cache.l2 == "curvine":
        return {"l2_max_age_s": lob.l2.max_age_hours * 3600.0, "janitor_every_s": janitor_every_s}
    return {"l2_max_age_s": None, "janitor_every_s": 0.0, "l2_target_fraction": 1.0}


def _at_least(value: float, low: float) -> bool:
    """True for a finite number >= low (NaN and infinities fail every comparison kvtier means)."""
    return math.isfinite(value) and value >= low


def run_folder(base: Path) -> Path:
    """A new folder under `base` for this run, named by its UTC start time (-2, -3, ... within the same second), so
    no run overwrites another's plots."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    folder, n = base / stamp, 1
    while folder.exists():
        n += 1
        folder = base / f"{stamp}-{n}"
    return folder


def _check_flags(args: argparse.Namespace) -> None:
    if args.l1_gb is not None:
        # The old name said GB for a GiB value; still accepted (the same GiB), with a pointer to the new one.
        print(
            "kvtier simulate: --l1-gb is deprecated: its value is GiB (LMCache's unit, like cache.l1_gb); use --l1-gib",
            file=sys.stderr,
        )
        if args.l1_gib is not None:
            raise UsageError("give --l1-gib only (--l1-gb is its deprecated name)")
        args.l1_gib = args.l1_gb
    simulate_elastic.check_flags(args)
    replicas, l1, l2 = args.replicas, args.l1_gib or [], args.l2_gb or []
    if len(l1) > 1 and len(l2) > 1:
        raise UsageError("--l1-gib and --l2-gb both sweep several sizes; sweep one of them at a time")
    checks = (
        (args.limit is not None and args.limit < 1, f"--limit {args.limit}", "give 1 or more requests"),
        (
            replicas is not None and not 1 <= replicas <= MAX_REPLICAS,
            f"--replicas {replicas}",
            f"give 1 to {MAX_REPLICAS}",
        ),
        (not all(_at_least(v, 0) for v in l1), f"--l1-gib {' '.join(map(str, l1))}", "give finite sizes, 0 or more"),
        (not all(_at_least(v, 0) for v in l2), f"--l2-gb {' '.join(map(str, l2))}", "give finite sizes, 0 or more"),
        (
            not (_at_least(args.qps_scale, 0) and args.qps_scale > 0),
            f"--qps-scale {args.qps_scale}",
            "give a finite factor > 0",
        ),
        (args.slots < 1, f"--slots {args.slots}", "give 1 or more"),
        (not _at_least(args.janitor_every, 0), f"--janitor-every {args.janitor_every}", "give finite seconds >= 0"),
        (args.prefix_min_match < 0, f"--prefix-min-match {args.prefix_min_match}", "give tokens >= 0"),
        (args.kv_aware_threshold < 0, f"--kv-aware-threshold {args.kv_aware_threshold}", "give tokens >= 0"),
    )
    for failed, flag, allowed in checks:
        if failed:
            raise UsageError(f"{flag} is out of range; {allowed}")


def _pick(config: Config, lob_name: str | None, endpoint_name: str | None) -> tuple[LineOfBusiness, Endpoint]:
    lobs = {lob.name: lob for lob in config.lobs}
    if not lobs:
        raise UsageError(
            f"{config.files['env']}: lobs: environment '{config.env.name}' runs no line of business, so it has no "
            "endpoint to simulate; list a LOB file under lobs: (see config/lobs/), or pick another environment with -e"
        )
    if lob_name is None:
        if len(lobs) != 1:
            raise UsageError(f"--lob is needed: environment '{config.env.name}' runs {', '.join(lobs) or 'no LOB'}")
        lob_name = next(iter(lobs))
    if lob_name not in lobs:
        raise UsageError(
            f"--lob '{lob_name}' is not a line of business of '{config.env.name}'; use one of {', '.join(lobs)}"
        )
    lob = lobs[lob_name]
    endpoints = {e.name: e for e in lob.endpoints}
    if endpoint_name is None:
        if len(endpoints) != 1:
            raise UsageError(f"--endpoint is needed: LOB '{lob.name}' has {name_list(list(endpoints))}")
        endpoint_name = next(iter(endpoints))
    if endpoint_name not in endpoints:
        raise UsageError(
            f"--endpoint '{endpoint_name}' is not in LOB '{lob.name}'; use one of {name_list(list(endpoints))}"
        )
    return lob, endpoints[endpoint_name]


def _file_bytes(path: Path) -> int:
    """The file's size, 0 when unknown (a pipe, a device, a file that cannot be read: load_trace says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _advance(bar: Any, task: int, offset: int) -> Callable[[int], None]:
    def update(done: int) -> None:
        bar.update(task, completed=offset + done)

    return update


PROGRESS_LINE_S = 10.0  # off a terminal (a CI log, a pipe): one progress line this often


class _Lines:
    """The progress bar's stand-in where stderr is not a terminal: a plain line when a task starts and then at most
    one every PROGRESS_LINE_S, so a long run in a log or a pipe is not silent."""

    def __init__(self) -> None:
        self.tasks: dict[int, tuple[str, float | None]] = {}
        self.start = time.monotonic()
        self.last = 0.0

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, visible: bool = True) -> int:  # noqa: ARG002
        """Announced either way (rich's `visible=False` hides a bar; a line names what is read)."""
        self.tasks[len(self.tasks)] = (description, total)
        print(f"kvtier simulate: {description} ...", file=sys.stderr, flush=True)
        self.last = time.monotonic()
        return len(self.tasks) - 1

    def update(self, task: int, completed: float) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_LINE_S:
            return
        self.last = now
        description, total = self.tasks[task]
        share = f" of {total:,.0f} ({completed / total:.0%})" if total else ""
        print(
            f"kvtier simulate: {description}: {completed:,.0f}{share}, {now - self.start:.0f} s",
            file=sys.stderr,
            flush=True,
        )


def _progress(console: Any, wanted: bool) -> Any:
    """A rich progress bar on stderr for long replays; plain lines every PROGRESS_LINE_S when stderr is not a
    terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if wanted and not console.is_terminal:
        return _Lines()

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (wanted and console.is_terminal),
    )
