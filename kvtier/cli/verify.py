"""`kvtier verify`: check a live deployment for the failures that are otherwise silent.

Every endpoint pod has exactly one LMCACHE_REMOTE_URL pointing at its own L2 directory, the L2 mount, PYTHONHASHSEED=0
and LMCACHE_REMOTE_SERDE=naive; every GPU node runs one ready Curvine worker and every master is ready; every LOB's
`l2-cache` claim is bound and its Kyverno Policy ready. Read-only, through your kubeconfig.
Exit 0 all good, 1 problems found, 3 cannot reach the cluster.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json

if TYPE_CHECKING:
    from kvtier.ops.verify import VerifyReport


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "verify",
        help="check a live deployment's L2 wiring, Curvine, claims and Kyverno policies (Kubernetes API)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_options(parser)
    add_json_option(parser)
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from kvtier.ops.kube import read_snapshot
    from kvtier.ops.verify import verify

    report = verify(config, read_snapshot(config, args.context))
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
    return int(report.exit_code)


def print_report(report: VerifyReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kvtier {report.environment}: live checks")
    for column in ("check", "subject", "result", "detail"):
        table.add_column(column, overflow="fold")
    for finding in report.findings:
        result = "[green]ok[/green]" if finding.ok else "[bold red]problem[/bold red]"
        table.add_row(finding.check, finding.subject, result, finding.message)
    console = Console()
    console.print(table)
    problems = sum(not f.ok for f in report.findings)
    if problems:
        console.print(f"[bold red]{problems} problem(s)[/bold red] in {len(report.findings)} checks")
    else:
        console.print(f"[green]all {len(report.findings)} checks passed[/green]")
