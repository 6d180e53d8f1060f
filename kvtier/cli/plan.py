"""`kvtier plan`: what each cache tier holds, how fast it loads, where L2 pays off, and what it all costs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json
from kvtier.errors import ExitCode, UsageError

DEFAULT_PROMPT_TOKENS = 4096
MAX_PROMPT_TOKENS = 10_000_000


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "plan", help="plan tier capacities, load and recompute times, and costs", description=__doc__
    )
    add_env_options(parser)
    add_json_option(parser)
    parser.add_argument(
        "--tokens",
        type=int,
        default=DEFAULT_PROMPT_TOKENS,
        metavar="N",
        help=f"prompt length for the recompute and L2-load times (default: {DEFAULT_PROMPT_TOKENS})",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="endpoints side by side, P5's hourly dollars and the rules (needs > 80 columns)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.tokens <= MAX_PROMPT_TOKENS:
        raise UsageError(f"--tokens {args.tokens} is out of range; use 1 to {MAX_PROMPT_TOKENS:,}")
    config = load_from_args(args)
    from kvtier.planner.report import build_plan

    plan = build_plan(config, args.tokens)
    if args.json:
        print_json(plan)
        return int(ExitCode.OK)
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    from kvtier.planner.tables import print_tables

    print_tables(plan, wide=args.wide)
    return int(ExitCode.OK)
