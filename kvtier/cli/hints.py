"""Unrecognised arguments: the sub-command's own usage and a hint, instead of the top-level usage.

argparse (3.11) reports words no parser took from the top-level parser ("kvtier: error: unrecognized arguments"),
whose usage lists only the commands. Here they are reported by the deepest sub-command parser that ran, with a hint:
a bare word where the command takes `-e` (`kvtier validate dev`), the closest option name (`--envv`), kvtier's
name for a `vllm bench serve` flag, or the sub-command an option belongs to when it comes before that sub-command's
name (`kvtier bench --qps 2 trace`).
"""

from __future__ import annotations

import argparse
import difflib
import os
from typing import NoReturn

# vllm bench serve's flag -> kvtier bench's (docs/benchmarking.md compares the two clients).
VLLM_BENCH_FLAGS = {
    "--request-rate": "--qps",
    "--max-concurrency": "--concurrency",
    "--metric-percentiles": "--percentiles",
    "--base-url": "--url",
    "--num-prompts": "--limit",
    "--dataset-path": "--trace",
}


def _children(parser: argparse.ArgumentParser) -> tuple[str | None, dict[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.dest, dict(action.choices)
    return None, {}


def deepest(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The sub-command parser that parsed `args` (kvtier -> bench -> sweep)."""
    while True:
        dest, children = _children(parser)
        chosen = getattr(args, dest, None) if dest else None
        if chosen not in children:
            return parser
        parser = children[str(chosen)]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def _taking(root: argparse.ArgumentParser, flag: str) -> list[str]:
    """The `prog` of every sub-command under `root` that has `flag`."""
    found = [root.prog] if flag in _options(root) else []
    for child in _children(root)[1].values():
        found += _taking(child, flag)
    return found


def hints(
    root: argparse.ArgumentParser, parser: argparse.ArgumentParser, extras: list[str], words: list[str]
) -> list[str]:
    """A hint for each unrecognised option that has one (vLLM's name, a near miss), or for a bare first word where
    the command takes `-e` and none was given."""
    options = _options(parser)
    found: list[str] = []
    for i, word in enumerate(extras):
        name = word.split("=", 1)[0]
        if name in VLLM_BENCH_FLAGS:
            ours = VLLM_BENCH_FLAGS[name]
            if ours == "--url" and ours not in options and "--write-url" in options:
                ours = "--write-url"
            if ours in options:
                found.append(f"{name} is vllm bench serve's name; {parser.prog} calls it {ours}")
                continue
            where = [p.removeprefix("kvtier ") for p in _taking(root, ours)]
            if where:
                found.append(f"{name} is vllm bench serve's name; kvtier calls it {ours}, in {' and '.join(where)}")
                continue
        if name.startswith("--"):
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
            below = [p.removeprefix("kvtier ") for p in _taking(parser, name) if p != parser.prog]
            if close:
                found.append(f"did you mean {close[0]}?")
            elif below:  # `kvtier bench --qps 2 trace`: an option of the sub-command, given before its name
                found.append(f"{name} is an option of {' and '.join(below)}: give it after the sub-command's name")
        elif (
            i == 0
            and not word.startswith("-")
            and "--env" in options
            and not {"-e", "--env"} & {w.split("=")[0] for w in words}
        ):
            found.append(f"the environment is an option: {parser.prog} -e {word}")
    return list(dict.fromkeys(found))


def parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """parse_args, with unrecognised words reported by the sub-command that ran, with a hint (exit 2)."""
    if os.environ.get("KVTIER_HINTS_BREAK"):  # the old behaviour, for the tests' break check
        return parser.parse_args(words)
    _options_before_the_sub_command(parser, words)
    args, extras = parser.parse_known_args(words)
    if extras:
        unrecognised(parser, deepest(parser, args), extras, words)
    return args


def _options_before_the_sub_command(root: argparse.ArgumentParser, words: list[str]) -> None:
    """`kvtier bench --request-rate 5`: an unknown option where a sub-command's name belongs. argparse would take the
    option's value for the sub-command ("invalid choice: '5'"); the option is the mistake, so it is reported, with its
    hint, by the parser whose sub-command is missing. kvtier's command parsers take no option with a value."""
    parser, i = root, 0
    while True:
        dest, children = _children(parser)
        if dest is None:
            return
        known = {o for a in parser._actions for o in a.option_strings}
        while i < len(words) and words[i] in known:
            i += 1
        if i == len(words):
            return
        if words[i] in children:
            parser, i = children[words[i]], i + 1
            continue
        if not words[i].startswith("-"):
            return  # a misspelt sub-command: argparse's "invalid choice" names it
        end = next((j for j in range(i, len(words)) if words[j] in children), len(words))
        unrecognised(root, parser, words[i:end], words)


def unrecognised(
    root: argparse.ArgumentParser, parser: argparse.ArgumentParser, extras: list[str], words: list[str]
) -> NoReturn:
    """The sub-command's usage, then `<prog>: error: unrecognized arguments: ...; <hints>` (exit 2)."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    found = hints(root, parser, extras, words)
    parser.error("; ".join([message, *found]) if found else f"{message} ({parser.prog} --help lists its options)")
