"""Options shared by subcommands (design: -e/--env, --config-dir, --json where output is data)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvtier.config.loader import DEFAULT_ENV, Config, resolve_config_dir
from kvtier.rules import load_checked


def add_env_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-e", "--env", default=DEFAULT_ENV, help=f"environment name (default: {DEFAULT_ENV})")
    parser.add_argument(
        "--config-dir", default=None, help="configuration folder (default: $KVTIER_CONFIG_DIR, else ./config)"
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def load_from_args(args: argparse.Namespace) -> Config:
    return load_checked(resolve_config_dir(args.config_dir), args.env)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")
