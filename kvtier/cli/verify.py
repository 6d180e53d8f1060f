"""`kvtier verify`: check a live deployment for the failures that are otherwise silent.

Every endpoint pod has exactly one LMCACHE_REMOTE_URL pointing at its own L2 directory, the L2 mount, PYTHONHASHSEED=0
and LMCACHE_REMOTE_SERDE=naive; every GPU node runs one ready Curvine worker and every master is ready; every LOB's
`l2-cache` claim is bound and its Kyverno Policy ready. Read-only, through your kubeconfig.
Exit 0 all good, 1 problems found, 3 cannot reach the cluster.

--probe proves the L2 end to end instead: for each endpoint with an L2, one salted ~2,000-token prompt to a ready pod
A, then (after LMCache's asynchronous store) to a ready pod B on another node, reached by port-forward through the
Kubernetes API; exit 0 with the tokens B took from L2, 1 with the likely cause of a miss, 3 when the cluster or a
pod cannot be reached. At most a few minutes per endpoint; read-only apart from the two requests.

--probe --isolation checks instead that no request is served KV cached under another cache_salt, on any tier: a
fresh prompt with salt X (--salt, else a random one) to pod A, again with X to pod B (it must hit), then with salt Y
to B and with no salt to A (neither may take a cached token). --probe --adapter NAME checks each endpoint serving
LoRA adapter NAME: NAME to A, NAME to B (a cross-replica L2 hit), then another adapter or the base model (no cached
token). Both judge each request by its own usage.prompt_tokens_details.cached_tokens; exit 0 only when every check
holds, 1 with the leak or miss and its cause, 2 when the engine refuses the salt (its own message), 3 unreachable.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json
from kvtier.errors import UsageError

if TYPE_CHECKING:
    from kvtier.config.loader import Config
    from kvtier.ops.probe import Check, PodAccess, ProbeReport, ProbeTiming
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
    parser.add_argument(
        "--isolation",
        action="store_true",
        help="with --probe: check that no request reads KV cached under another cache_salt (see above)",
    )
    parser.add_argument(
        "--adapter",
        metavar="NAME",
        help="with --probe: check a cross-replica L2 hit for LoRA adapter NAME and none for another (see above)",
    )
    parser.add_argument("--salt", metavar="TEXT", help="with --isolation: salt X (default: a fresh random one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checks_asked = args.isolation or args.adapter is not None
    if checks_asked and not args.probe:
        raise UsageError("--isolation and --adapter check live requests: add --probe")
    if args.salt is not None and not args.isolation:
        raise UsageError("--salt is salt X of the isolation check: add --isolation")
    config = load_from_args(args)
    if checks_asked:
        from kvtier.ops.portforward import KubePodAccess

        checks = isolation_checks(config, args.salt) if args.isolation else []
        checks += adapter_checks(config, args.adapter) if args.adapter is not None else []
        return run_checks(config, checks, KubePodAccess(args.context), as_json=args.json)
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


COLUMNS = ("check", "endpoint", "pods (A -> B)", "result", "hit tokens", "detail")


def isolation_checks(config: Config, salt: str | None) -> list[Check]:
    """One cache_salt check per endpoint, in configuration order (L0 keys on the salt even without L1 or L2)."""
    from kvtier.ops.probe import Check

    return [Check(lob.name, e, salt=salt) for lob in config.lobs for e in lob.endpoints]


def adapter_checks(config: Config, adapter: str) -> list[Check]:
    """One check per endpoint serving `adapter`: its KV against another of its adapters (then the base model too),
    or the base model. UsageError when no endpoint serves it."""
    from kvtier.ops.probe import Check

    checks: list[Check] = []
    served: list[str] = []
    for lob in config.lobs:
        for e in lob.endpoints:
            names = [a.name for a in e.adapters]
            served += [f"{a} ({lob.name}/{e.name})" for a in names]
            if adapter in names:
                others = [n for n in names if n != adapter][:1]
                checks.append(Check(lob.name, e, adapter=adapter, others=(*others, e.model.id)))
    if not checks:
        listed = ", ".join(served) if served else "none"
        raise UsageError(f"no endpoint of {config.env.name} serves adapter {adapter!r}; adapters: {listed}")
    return checks


def run_checks(
    config: Config, checks: list[Check], access: PodAccess, *, as_json: bool, timing: ProbeTiming | None = None
) -> int:
    import asyncio

    from kvtier.ops.probe import ProbeTiming, check_all

    report = asyncio.run(check_all(config.env.name, checks, access, timing=timing or ProbeTiming()))
    return emit_probe(report, as_json=as_json)


def emit_probe(report: ProbeReport, *, as_json: bool) -> int:
    if as_json:
        print_json(report.to_json())
        return int(report.exit_code)
    from rich.console import Console
    from rich.table import Table

    l2_only = all(r.check == "l2" for r in report.results)
    title = "cross-pod L2 probe" if l2_only else "cache isolation probe"
    table = Table(title=f"kvtier {report.environment}: {title}")
    for column in ("endpoint", "pods (A -> B)", "result", "hit tokens", "detail") if l2_only else COLUMNS:
        table.add_column(column, overflow="fold")
    colours = {
        "hit": "green",
        "isolated": "green",
        "miss": "bold red",
        "leak": "bold red",
        "refused": "bold red",
        "unreachable": "bold yellow",
    }
    for r in report.results:
        pods = f"{r.pod_a} -> {r.pod_b}" if r.pod_b else (r.pod_a or "-")
        result = f"[{colours[r.outcome]}]{r.outcome}[/{colours[r.outcome]}]"
        row = (f"{r.lob}/{r.endpoint}", pods, result, str(r.hit_tokens), r.message)
        table.add_row(*row if l2_only else (r.check, *row))
    Console().print(table)
    if not report.results:
        Console().print("no endpoint has an L2: nothing to probe")
    return int(report.exit_code)
