"""`kvtier validate`: check the configuration of one environment (exit 0 valid, 2 invalid)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json
from kvtier.errors import ConfigError, ExitCode


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate", help="validate the configuration of an environment", description=__doc__
    )
    add_env_options(parser)
    add_json_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_from_args(args)
    except ConfigError as err:
        if args.json:
            print_json({"valid": False, "errors": [vars(p) for p in err.problems], "warnings": []})
            return int(ExitCode.USAGE)
        raise
    if args.json:
        print_json({"valid": True, "errors": [], "warnings": [vars(p) for p in config.warnings]})
        return int(ExitCode.OK)
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"{config.env.name}: configuration is valid")
    return int(ExitCode.OK)
