"""`kvtier status`: is the HyperPod cluster healthy? Cluster status, instance groups (current vs target nodes),
Tiered Storage, node recovery, the EKS add-ons kvtier expects, and the Curvine FUSE client each GPU node runs (a
mixed fleet, or a node behind the pinned version, is degraded: `kvtier l2 roll-fuse`), each with a verdict.

Read-only AWS calls (sagemaker:DescribeCluster, eks:DescribeCluster, eks:DescribeAddon, cloudformation:ListStacks and
DescribeStacks: kvtier-<env>-* stacks the config no longer builds) with your credentials; the FUSE clients through
your kubeconfig (list nodes and pods in `curvine`; unknown when it cannot be read).
AWS calls time out after 4 s to connect and 8 s to read, 2 attempts each.
Exit 0 healthy, 1 degraded, 3 cannot check (no credentials, no such cluster, AWS unreachable, a malformed AWS config
file).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_checks, print_json

if TYPE_CHECKING:
    from kvtier.config.environment import Environment
    from kvtier.ops.checks import Check
    from kvtier.ops.status import StatusReport


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "status",
        help="check the HyperPod cluster, Tiered Storage and EKS add-ons through the AWS APIs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_options(parser)
    add_json_option(parser)
    parser.add_argument("--profile", default=None, help="AWS profile (default: the usual credential chain)")
    parser.add_argument("--context", default=None, help="kubeconfig context for the FUSE clients (default: current)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_from_args(args)
    from kvtier.ops.aws import announce
    from kvtier.ops.status import clients, cloudformation_client, collect

    sagemaker, eks = clients(config.env, args.profile)
    announce(f"AWS in {config.env.region}", str(sagemaker.meta.endpoint_url))
    report = collect(config.env, sagemaker, eks, cloudformation=cloudformation_client(config.env, args.profile))
    report = dataclasses.replace(report, checks=(*report.checks, *fuse_checks(config.env, args.context)))
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
    return int(report.exit_code)


def fuse_checks(env: Environment, context: str | None) -> list[Check]:
    """The GPU nodes' FUSE clients (kvtier/ops/fuse.py); one `unknown` check when the cluster cannot be read."""
    from kubernetes import client

    from kvtier.errors import UnavailableError
    from kvtier.ops.checks import Check
    from kvtier.ops.fuse import fleet_checks, read_fleet
    from kvtier.ops.kube import api_client

    if not env.hyperpod.installs("curvine"):
        return []  # the owner's Curvine: not kvtier's to pin
    try:
        return fleet_checks(env, read_fleet(env, client.CoreV1Api(api_client(context))))
    except UnavailableError as err:
        return [Check("fuse", "clients", "unreadable", "unknown", str(err))]


def print_report(report: StatusReport) -> None:
    print_checks(
        f"kvtier {report.environment}: HyperPod {report.hyperpod_cluster}, EKS {report.eks_cluster}",
        report.checks,
        good="healthy",
        bad="degraded",
    )
