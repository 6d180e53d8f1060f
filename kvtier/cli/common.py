"""Options shared by subcommands (design: -e/--env, --config-dir, --json where output is data)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from kvtier.config.loader import DEFAULT_ENV, Config, resolve_config_dir
from kvtier.ops.checks import Check
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


def print_checks(title: str, checks: Sequence[Check], *, good: str, bad: str) -> None:
    """The checks as a table, then one line: `good` when every check is ok, else `bad` with how many are not."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("area", "name", "value", "verdict", "detail"):
        table.add_column(column, overflow="fold")
    for check in checks:
        style = {"ok": "green", "unknown": "yellow"}.get(check.verdict, "bold red")
        table.add_row(check.area, check.name, check.value, f"[{style}]{check.verdict}[/{style}]", check.detail)
    console = Console()
    console.print(table)
    failing = [c for c in checks if c.verdict != "ok"]
    if failing:
        console.print(f"[bold red]{bad}[/bold red]: {len(failing)} of {len(checks)} checks need attention")
    else:
        console.print(f"[green]{good}[/green]: all {len(checks)} checks passed")
