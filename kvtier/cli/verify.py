"""`kvtier verify`: check a live deployment for the failures that are otherwise silent.

Every endpoint pod has exactly one LMCACHE_REMOTE_URL pointing at its own L2 directory, the L2 mount, PYTHONHASHSEED=0
and LMCACHE_REMOTE_SERDE=naive; every GPU node runs one ready Curvine worker and every master is ready; every LOB's
`l2-cache` claim is bound and its Kyverno Policy ready. Read-only, through your kubeconfig.
Exit 0 all good, 1 problems found, 3 cannot reach the cluster.

--probe proves the L2 end to end instead: for each endpoint with an L2, one salted ~2,000-token prompt to a ready pod
A, then (after LMCache's asynchronous store) to a ready pod B on another node, reached by port-forward through the
Kubernetes API; exit 0 with the tokens B took from L2, 1 with the likely cause of a miss, 3 when the cluster or a
pod cannot be reached. At most a few minutes per endpoint; read-only apart from the two requests.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json

if TYPE_CHECKING:
    from kvtier.config.loader import Config
    from kvtier.ops.probe import PodAccess, ProbeReport, ProbeTiming
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
    parser.add_argument(
        "--probe", action="store_true", help="prove a cross-pod L2 hit per endpoint with two requests (see above)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    if args.probe:
        from kvtier.ops.portforward import KubePodAccess

        # no usable kubeconfig or an API that does not answer: UnavailableError, one line and exit 3 from main()
        return run_probe(config, KubePodAccess(args.context), as_json=args.json)
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


def probe_targets(config: Config) -> list[tuple[str, str]]:
    """(lob, endpoint) of every endpoint with an L2, in configuration order."""
    return [(lob.name, e.name) for lob in config.lobs for e in lob.endpoints if e.cache.l2 != "none"]


def run_probe(config: Config, access: PodAccess, *, as_json: bool, timing: ProbeTiming | None = None) -> int:
    import asyncio

    from kvtier.ops.probe import ProbeTiming, probe_all

    connectors = {(lob.name, e.name): e.cache.connector for lob in config.lobs for e in lob.endpoints}
    report = asyncio.run(
        probe_all(config.env.name, probe_targets(config), access, timing=timing or ProbeTiming(), connectors=connectors)
    )
    return emit_probe(report, as_json=as_json)


def emit_probe(report: ProbeReport, *, as_json: bool) -> int:
    if as_json:
        print_json(report.to_json())
        return int(report.exit_code)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"kvtier {report.environment}: cross-pod L2 probe")
    for column in ("endpoint", "pods (A -> B)", "result", "hit tokens", "detail"):
        table.add_column(column, overflow="fold")
    colours = {"hit": "green", "miss": "bold red", "unreachable": "bold yellow"}
    for r in report.results:
        pods = f"{r.pod_a} -> {r.pod_b}" if r.pod_a else "-"
        result = f"[{colours[r.outcome]}]{r.outcome}[/{colours[r.outcome]}]"
        table.add_row(f"{r.lob}/{r.endpoint}", pods, result, str(r.hit_tokens), r.message)
    Console().print(table)
    if not report.results:
        Console().print("no endpoint has an L2: nothing to probe")
    return int(report.exit_code)
