"""The `kvtier` command: one subcommand a module, each registering its own parser.

Modules import only light things at the top; heavy ones (aws_cdk, matplotlib, boto3) are imported when a
command runs, so `kvtier validate` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvtier import __version__
from kvtier.errors import ExitCode, KvtierError

# Subcommands of the design, in help order: each module defines `register(subparsers)`.
COMMANDS = ("validate", "plan", "bench", "simulate", "preflight", "status", "verify")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtier",
        description="Plan, validate, benchmark and check kvtier deployments (tiered KV cache on SageMaker HyperPod).",
    )
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"kvtier.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"kvtier.cli.{name}":
                raise
            continue  # not built yet
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KvtierError as err:
        print(f"kvtier {args.command}: {err}", file=sys.stderr)
        return int(err.exit_code)
    except KeyboardInterrupt:
        print(f"kvtier {args.command}: interrupted", file=sys.stderr)
        return 130
    return code if code is not None else int(ExitCode.OK)
