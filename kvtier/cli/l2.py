"""`kvtier l2`: day-2 operations on the shared L2 pool.

`kvtier l2 roll-fuse -e ENV` moves every GPU node's Curvine FUSE client to the version kvtier pins
(`curvine.images.csi`), one node at a time: cordon, replace the FUSE pod, check that the new client answers (a file
written and read back through it), let the L2 healer restart the node's L2 pods, uncordon (docs/l2.md "Upgrading
the FUSE clients"). Run it after the platform stack rolled the CSI node plugin. Every wait is bounded; a node that
does not finish stops the run with one line saying whether it stays cordoned and how to finish. Running the command
again resumes: the cluster holds the state (kvtier marks the nodes it cordons). `--dry-run` prints the plan and
changes nothing.
Exit 0 every node on the pinned version (or the plan, with --dry-run), 1 a node did not finish, 2 bad input,
3 the cluster cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_json
from kvtier.errors import UsageError

if TYPE_CHECKING:
    from kvtier.ops.fuse_roll import Plan

INTERRUPTED = 130


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "l2",
        help="day-2 operations on the L2 pool (roll-fuse: upgrade the GPU nodes' FUSE clients)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="l2_command", metavar="COMMAND", required=True)
    roll = commands.add_parser(
        "roll-fuse",
        help="move every GPU node's FUSE client to the pinned version, node by node",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_options(roll)
    add_json_option(roll)
    roll.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    roll.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    roll.add_argument("--node", action="append", default=[], help="only this GPU node (repeat); default: all")
    roll.add_argument("--fuse-timeout", type=float, default=None, help="seconds for a new FUSE pod to answer")
    roll.add_argument("--heal-timeout", type=float, default=None, help="seconds for the healer (default: its pace)")
    roll.add_argument("--node-ready-timeout", type=float, default=None, help="seconds for a node to be Ready")
    roll.set_defaults(func=run_roll)


def run_roll(args: argparse.Namespace) -> int:
    from kubernetes import client

    from kvtier.ops.fuse_roll import Bounds, Cluster, Roller, live, plan, uses_l2
    from kvtier.ops.kube import api_client

    for flag in ("fuse_timeout", "heal_timeout", "node_ready_timeout"):
        value = getattr(args, flag)
        if value is not None and not 0 < value <= 24 * 3600:
            raise UsageError(f"--{flag.replace('_', '-')} {value:g} is not a number of seconds in (0, 86400]")
    config = load_from_args(args)
    env = config.env
    if not env.hyperpod.installs("curvine"):
        raise UsageError(
            f"{config.files['env']}: hyperpod.existing.install.curvine is false: the FUSE clients are not kvtier's "
            "to roll on this cluster"
        )
    defaults = Bounds()
    bounds = Bounds(
        node_ready_s=args.node_ready_timeout or defaults.node_ready_s,
        fuse_s=args.fuse_timeout or defaults.fuse_s,
        heal_s=args.heal_timeout,
    )
    cluster = Cluster(env, client.CoreV1Api(api_client(args.context)))
    fleet = cluster.fleet()
    unknown = sorted(set(args.node) - {n.node for n in fleet})
    if unknown:
        raise UsageError(f"--node {', '.join(unknown)}: not a GPU node of {env.name} (kubectl get nodes)")
    if args.node:
        fleet = [n for n in fleet if n.node in args.node]
    l2_pods = {n.node: sum(1 for p in cluster.pods_on(n.node) if uses_l2(p) and live(p)) for n in fleet if n.fuse_pods}
    planned = plan(env, fleet, l2_pods)
    if args.json and args.dry_run:
        print_json(planned.to_json())
        return 0
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout holds only the JSON result
    print_plan(env.name, planned, dry_run=args.dry_run, file=out)
    if args.dry_run:
        return 0
    roller = Roller(env, cluster, bounds, say=lambda line: print(line, file=out, flush=True))
    node = ""
    try:
        for step in planned.work:
            node = step.node
            roller.roll(step.node, resume=step.action == "resume")
    except KeyboardInterrupt:
        print(
            f"kvtier l2 roll-fuse: interrupted on node {node}, which may stay cordoned: run "
            f"`kvtier l2 roll-fuse -e {env.name}` again to finish it",
            file=sys.stderr,
        )
        return INTERRUPTED
    blocked = [n for n in planned.nodes if n.action == "blocked"]
    if blocked:
        first = blocked[0]
        print(
            f"kvtier l2 roll-fuse: {len(blocked)} node(s) not rolled, first {first.node}: {first.why}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print_json({**planned.to_json(), "rolled": [n.node for n in planned.work]})
    else:
        print(f"kvtier {env.name}: every GPU node with a FUSE pod runs {planned.target}")
    return 0


def print_plan(env: str, planned: Plan, *, dry_run: bool, file: TextIO = sys.stdout) -> None:
    counts = {a: sum(1 for n in planned.nodes if n.action == a) for a in ("roll", "resume", "done", "none", "blocked")}
    summary = ", ".join(f"{a} {n}" for a, n in counts.items() if n)
    print(
        f"kvtier {env}: FUSE client {planned.target} on {len(planned.nodes)} GPU node(s) ({summary or 'none'})",
        file=file,
    )
    steps = "cordon, replace the FUSE pod, check it answers, let the healer restart the L2 pods, uncordon"
    for n in planned.nodes:
        what = {"roll": steps, "resume": f"{n.why}: finish ({steps})"}.get(n.action, n.why)
        pods = f" ({n.l2_pods} L2 pod(s) to restart)" if n.action in ("roll", "resume") else ""
        print(f"  {n.node}: {n.current} -> {planned.target}: {n.action}: {what}{pods}", file=file)
    if dry_run:
        print("dry run: nothing changed", file=file)
