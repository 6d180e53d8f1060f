"""The `kvtier` command: one subcommand a module, each registering its own parser.

Modules import only light things at the top; heavy ones (aws_cdk, matplotlib, boto3) are imported when a
command runs, so `kvtier validate` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kvtier import __version__
from kvtier.cli import hints
from kvtier.errors import ExitCode, KvtierError

# Subcommands of the design, in help order: each module defines `register(subparsers)`.
COMMANDS = ("validate", "plan", "bench", "simulate", "preflight", "status", "verify", "l2")


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


INTERRUPTED = 130  # the shell's code for a command stopped by SIGINT
# The shell's code for a writer whose reader left (`kvtier plan | head -1`): 128 + SIGPIPE, what `seq 9999 | head -1`
# gives. Python ignores SIGPIPE (restoring it would also kill the bench client on a closed socket), so kvtier exits
# with that code itself, silently.
READER_GONE = 141
MAX_LINE = 1000  # characters of one error line on stderr; a message that long has its lists capped at the source


def main(argv: Sequence[str] | None = None) -> int:
    stdout_was_null = _stdout_is_null()
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at interpreter exit, where a closed pipe prints "Exception ignored"
        return code
    except BrokenPipeError:
        return _reader_gone()
    except SystemExit as exit_:
        # rich's Console.on_broken_pipe points stdout at os.devnull and raises SystemExit(1): a reader that left.
        if exit_.code == 1 and not stdout_was_null and _stdout_is_null():
            return _reader_gone()
        raise


def _stdout_is_null() -> bool:
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), Path(os.devnull).stat())
    except (OSError, ValueError, AttributeError):  # no real stdout (pytest's capture, a closed file)
        return False


def _reader_gone() -> int:
    """Stdout's reader has left: drop what is still buffered (nothing can read it) and exit as the shell expects."""
    if os.environ.get("KVTIER_PIPE_BREAK"):  # the old behaviour, for tests/cli/test_pipe.py
        raise BrokenPipeError(32, "Broken pipe")
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return READER_GONE


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if "--json" in words:
        args = _parse_for_json(parser, words)
        if isinstance(args, int):
            return args
    else:
        args = hints.parse(parser, words)
    try:
        code: int = args.func(args)
    except KvtierError as err:
        _fail(args, str(err), int(err.exit_code), getattr(err, "problems", None))
        return int(err.exit_code)
    except KeyboardInterrupt:
        _fail(args, "interrupted", INTERRUPTED)
        return INTERRUPTED
    return code if code is not None else int(ExitCode.OK)


def _parse_for_json(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace | int:
    """Parse `words`; a usage error (exit 2) is also printed as JSON on stdout, as every other error with --json."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return hints.parse(parser, words)
    except SystemExit as exit_:
        sys.stderr.write(captured.getvalue())
        if exit_.code in (0, None):
            raise
        lines = captured.getvalue().strip().splitlines()
        command = next((w for w in words if w in COMMANDS), None)
        _print_error_json(command, lines[-1] if lines else "invalid usage", int(ExitCode.USAGE), None)
        return int(ExitCode.USAGE)


def _fail(args: argparse.Namespace, message: str, code: int, problems: Sequence[object] | None = None) -> None:
    """The error line on stderr; with --json also a JSON object on stdout, so a script reads every outcome there."""
    text = f"kvtier {args.command}: {message}"  # one problem a line; the first carries the command
    print("\n".join(_cap(line) for line in text.splitlines()), file=sys.stderr)
    if getattr(args, "json", False):
        _print_error_json(args.command, message, code, problems)


def _cap(line: str) -> str:
    """A line a person can read: cut past MAX_LINE characters, saying how much and where the whole message is."""
    if len(line) <= MAX_LINE:
        return line
    kept = MAX_LINE - 100
    return f"{line[:kept]} ... ({len(line) - kept:,} more characters; --json prints the whole message)"


def _print_error_json(command: str | None, message: str, code: int, problems: Sequence[object] | None) -> None:
    error: dict[str, object] = {"command": command, "exit_code": code, "message": message}
    if problems:
        error["problems"] = [vars(p) for p in problems]
    json.dump({"error": error}, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
