"""`kvtier preflight`: is the account ready for the environment's first deploy? Read-only AWS calls with your
credentials: the CDK bootstrap stack, the account, HyperPod service quotas for every instance group, the zones and
their AZ IDs, every pinned EKS add-on version for the Kubernetes version, the HyperPod Inference add-on in the region,
and an existing cluster's status and orchestrator.

Exit 0 ready, 1 problems (each with its fix), 3 cannot check (no credentials, AWS unreachable).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json

if TYPE_CHECKING:
    from kvtier.ops.preflight import PreflightReport

VERDICT_STYLE = {"ok": "green", "problem": "bold red", "unknown": "yellow"}


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "preflight",
        help="check the AWS account and region before the first deploy (read-only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_options(parser)
    add_json_option(parser)
    parser.add_argument("--profile", default=None, help="AWS profile (default: the usual credential chain)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from kvtier.ops.preflight import clients, collect

    report = collect(config.env, clients(config.env, args.profile))
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
    return int(report.exit_code)


def print_report(report: PreflightReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kvtier preflight {report.environment} ({report.region})")
    for column in ("area", "name", "value", "verdict", "detail"):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        style = VERDICT_STYLE[check.verdict]
        table.add_row(check.area, check.name, check.value, f"[{style}]{check.verdict}[/{style}]", check.detail)
    console = Console()
    console.print(table)
    bad = [c for c in report.checks if c.verdict != "ok"]
    if bad:
        console.print(f"[bold red]not ready[/bold red]: {len(bad)} of {len(report.checks)} checks need attention")
    else:
        console.print(f"[green]ready[/green]: all {len(report.checks)} checks passed")
