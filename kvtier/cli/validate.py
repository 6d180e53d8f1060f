"""`kvtier validate`: check the configuration of one environment (exit 0 valid, 2 invalid).

With `--previous <cdk.out>`, also synthesize and compare with that earlier synth: changes that replace the
HyperPod cluster, change the Curvine master count or touch an operator endpoint's routing are refused (exit 1)
unless `--allow-replacement`. Endpoints whose L2 identity changes are reported as "L2 starts cold", and the
NetworkPolicies, admission rules and Pod Security labels the deploy adds are named (notices).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json
from kvtier.config.loader import Config
from kvtier.errors import ConfigError, ExitCode, UsageError


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate", help="validate the configuration of an environment", description=__doc__
    )
    add_env_options(parser)
    add_json_option(parser)
    parser.add_argument("--previous", type=Path, help="an earlier cdk.out folder to compare with (day-2 guard)")
    parser.add_argument(
        "--allow-replacement", action="store_true", help="report replacing changes but do not refuse them"
    )
    parser.set_defaults(func=run)


def _day2(config: Config, previous: Path) -> tuple[list[str], list[str]]:
    """(refusable changes, notices)."""
    from kvtier.rules.day2 import (
        added_admission_rules,
        added_network_policies,
        autoscaler_handovers,
        cold_starts,
        compare,
        pod_security_changes,
        templates,
    )

    if not (previous / "manifest.json").is_file():
        raise UsageError(f"{previous}: not a cdk.out folder (no manifest.json); pass the output of an earlier synth")
    try:
        before = templates(previous)  # read first: a broken folder is found before a full synth
    except ValueError as err:
        raise UsageError(f"{err}; pass the cdk.out folder of an earlier synth") from None
    _check_same_environment(config, previous, before)  # before the ~10 s synth: the stack names say it at once
    from kvtier.app.jsii_node import prefer_project_node

    prefer_project_node()  # before aws_cdk starts the jsii kernel
    from kvtier.app.main import build, new_app

    with tempfile.TemporaryDirectory() as work:
        app = new_app(work)
        build(app, config)
        app.synth()
        after = templates(Path(work))
    notices = [*cold_starts(before, after), *autoscaler_handovers(before, after)]
    notices += [  # issue 33: the policies a deploy adds
        *added_network_policies(before, after),
        *added_admission_rules(before, after),
        *pod_security_changes(before, after),
    ]
    return [str(c) for c in compare(before, after)], [str(c) for c in notices]


def _check_same_environment(config: Config, previous: Path, before: dict[str, Any]) -> None:
    """`previous` must hold a stack this environment builds (status.expected_stacks: the stack names of the config,
    so no synth is needed); a synth of another environment would compare as "everything replaced"."""
    from kvtier.errors import name_list
    from kvtier.ops.status import expected_stacks

    expected = expected_stacks(config.env)
    if not set(before) & expected:
        raise UsageError(
            f"{previous}: its stacks ({name_list(sorted(before)) or 'none'}) are not this environment's "
            f"({name_list(sorted(expected))}); pass a synth of environment {config.env.name}"
        )


def run(args: argparse.Namespace) -> int:
    try:
        config = load_from_args(args)
    except ConfigError as err:
        if args.json:
            print_json(
                {
                    "valid": False,
                    "errors": [vars(p) for p in err.problems],
                    "warnings": [],
                    "changes": [],
                    "notices": [],
                }
            )
            return int(ExitCode.USAGE)
        raise
    changes, notices = _day2(config, args.previous) if args.previous else ([], [])
    refused = bool(changes) and not args.allow_replacement
    if args.json:
        print_json(
            {
                "valid": not refused,
                "errors": [],
                "warnings": [vars(p) for p in config.warnings],
                "changes": changes,
                "notices": notices,
            }
        )
        return int(ExitCode.PROBLEMS if refused else ExitCode.OK)
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for notice in notices:
        print(f"notice: {notice}", file=sys.stderr)
    for change in changes:
        print(f"{'refused' if refused else 'allowed'}: {change}", file=sys.stderr)
    if refused:
        print(
            f"{config.env.name}: {len(changes)} replacing change(s) refused; rerun with --allow-replacement "
            "if they are intended",
            file=sys.stderr,
        )
        return int(ExitCode.PROBLEMS)
    print(f"{config.env.name}: configuration is valid")
    return int(ExitCode.OK)
