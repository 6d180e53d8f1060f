"""`kvtier simulate --autoscale`: replay the trace while an autoscaler adds and removes replicas
(kvtier/simulate/elastic.py), for each min replicas asked, with and without the shared L2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import print_json
from kvtier.errors import ExitCode, UsageError
from kvtier.simulate.elastic import STARTUP_S, TARGET_INFLIGHT, ScalePolicy

if TYPE_CHECKING:
    from kvtier.config.endpoint import Endpoint
    from kvtier.config.loader import Config
    from kvtier.config.lob import LineOfBusiness
    from kvtier.planner.model import TierModel
    from kvtier.simulate.engine import SimConfig
    from kvtier.trace import Trace

# The flags only --autoscale reads (argparse dest), so that one given alone is refused rather than ignored.
POLICY_FLAGS = ("min_replicas", "max_replicas", "target_inflight", "polling_s", "cooldown_s", "startup_s")


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("autoscaling (--autoscale)")
    group.add_argument(
        "--autoscale",
        action="store_true",
        help="replay with an autoscaler (KEDA's HPA) and report GPU-hours and TTFT with and without the shared L2",
    )
    group.add_argument(
        "--min-replicas",
        type=int,
        nargs="+",
        metavar="N",
        help="min replicas; several values sweep it (default: the endpoint's autoscaling.min_replicas)",
    )
    group.add_argument("--max-replicas", type=int, help="max replicas (default: autoscaling.max_replicas)")
    group.add_argument(
        "--target-inflight",
        type=float,
        help=f"requests waiting or running per replica the autoscaler aims at (default {TARGET_INFLIGHT:g})",
    )
    group.add_argument("--polling-s", type=float, help="seconds between decisions (default: polling_interval_s)")
    group.add_argument(
        "--cooldown-s", type=float, help="scale-down window in seconds (default: autoscaling.cooldown_period_s)"
    )
    group.add_argument(
        "--startup-s",
        type=float,
        help=f"seconds from scale-up to a new replica serving (default {STARTUP_S:g}: vLLM start and weight load)",
    )


def check_flags(args: argparse.Namespace) -> None:
    """Policy flags without --autoscale, and the replay flags --autoscale cannot take, in one line each."""
    given = [f"--{name.replace('_', '-')}" for name in POLICY_FLAGS if getattr(args, name) is not None]
    if not args.autoscale:
        if given:
            raise UsageError(f"{given[0]} is an autoscaling setting; add --autoscale")
        return
    if args.replicas is not None:
        raise UsageError("--replicas and --autoscale exclude each other; give --min-replicas and --max-replicas")
    if len(args.routing or []) > 1:
        raise UsageError("--autoscale replays one routing strategy; give one --routing (default: the endpoint's)")
    if len(args.l1_gib or []) > 1 or len(args.l2_gb or []) > 1:
        raise UsageError("--autoscale sweeps min replicas, not sizes; give one --l1-gib and one --l2-gb")


def policies(args: argparse.Namespace, endpoint: Endpoint) -> list[ScalePolicy]:
    """One ScalePolicy per min replicas: flags first, then the endpoint's autoscaling section, then its defaults."""
    from kvtier.config.endpoint import Autoscaling

    section = endpoint.autoscaling

    def setting(flag: Any, field: str) -> Any:
        if flag is not None:
            return flag
        return getattr(section, field) if section is not None else Autoscaling.model_fields[field].default

    maximum = setting(args.max_replicas, "max_replicas")
    lows = args.min_replicas or [setting(None, "min_replicas")]
    return [
        ScalePolicy(
            min_replicas=low,
            max_replicas=maximum,
            target_inflight=args.target_inflight if args.target_inflight is not None else TARGET_INFLIGHT,
            polling_s=float(setting(args.polling_s, "polling_interval_s")),
            cooldown_s=float(setting(args.cooldown_s, "cooldown_period_s")),
            startup_s=args.startup_s if args.startup_s is not None else STARTUP_S,
        )
        for low in dict.fromkeys(lows)
    ]


def run(
    args: argparse.Namespace,
    config: Config,
    lob: LineOfBusiness,
    endpoint: Endpoint,
    trace: Trace,
    tier_model: Any,
    out: Path,
    sim_config: Callable[[str, TierModel], SimConfig],
    console: Any,
) -> int:
    """Replay, print (or JSON) and plot; `sim_config(routing, model)` gives a replay's settings (the fixed-replica
    runs' own), `console` the report's."""
    from kvtier.simulate.elastic import simulate_elastic
    from kvtier.simulate.elastic_report import ElasticRow, comparison_lines, json_rows, policy_line, table
    from kvtier.simulate.trace import to_units

    plans = policies(args, endpoint)
    routing = (args.routing or [endpoint.routing])[0]
    l1 = args.l1_gib[0] if args.l1_gib else None
    l2 = args.l2_gb[0] if args.l2_gb else None
    models: list[tuple[bool, TierModel]] = [
        (True, tier_model(config, lob.name, endpoint.name, l1_gib=l1, l2_gb=l2)),
        (False, tier_model(config, lob.name, endpoint.name, l1_gib=l1, l2_gb=0.0)),
    ]
    if not models[0][1].has_l2:
        raise UsageError(
            f"endpoint '{endpoint.name}' has no shared L2 to compare (cache.l2 is {endpoint.cache.l2!r}, or --l2-gb 0); "
            "give --l2-gb GB or simulate an endpoint with cache.l2: curvine"
        )
    units = to_units(trace, models[0][1].chunk_tokens, args.qps_scale)  # the L2 size changes no chunk
    rows = []
    for plan in plans:
        for has_l2, model in models:
            rows.append(
                ElasticRow(
                    plan.min_replicas,
                    has_l2,
                    simulate_elastic(units, model, sim_config(routing, model), plan, endpoint.tensor_parallel),
                )
            )
    where = f"{config.env.name}/{lob.name}/{endpoint.name}"
    title = f"{where} on {args.trace.name} ({routing}, x{args.qps_scale:g} rate, seed {args.seed})"
    plots: list[str] = []
    if not args.no_plots:
        from kvtier.simulate.plots import write_elastic_plot

        first = [r for r in rows if r.min_replicas == rows[0].min_replicas]
        labelled = [(f"min {r.min_replicas}, L2 {'on' if r.l2 else 'off'}", r.run) for r in first]
        plots.append(str(write_elastic_plot(labelled, out, title)))
    if args.json:
        print_json(
            {
                "env": config.env.name,
                "lob": lob.name,
                "endpoint": endpoint.name,
                "routing": routing,
                "trace": {"path": str(args.trace), "requests": len(trace)},
                "gpus_per_replica": endpoint.tensor_parallel,
                "units": {"ttft": "s", "gpu_hours": "GPU x hours"},
                "results": json_rows(rows),
                "plots": plots,
            }
        )
    else:
        console.print(title, highlight=False)
        console.print(policy_line(rows, endpoint.tensor_parallel), highlight=False)
        console.print(table(rows))
        for line in comparison_lines(rows):
            console.print(line, highlight=False, markup=False)
        for plot in plots:
            console.print(f"wrote {plot}", highlight=False)
    if not any(r.run.result.served for r in rows):
        print(
            f"kvtier simulate: every request is longer than max_model_len {models[0][1].max_model_len}", file=sys.stderr
        )
        return int(ExitCode.PROBLEMS)
    return int(ExitCode.OK)
