"""`kvtier preflight`: is the account ready for the environment's first deploy? Read-only AWS calls with your
credentials: the CDK bootstrap stack, the account, HyperPod service quotas for every instance group, the zones and
their AZ IDs, every pinned EKS add-on version for the Kubernetes version, the HyperPod Inference add-on in the region,
each group's instance type offered in every zone, leftovers of an earlier failed attempt under kvtier's fixed names,
an existing cluster's status, orchestrator, NodeRecovery and OIDC provider, (with `model_bucket_access: tagged`) that each S3
model bucket the LOB files name has S3 ABAC on and the environment's model-reader tag (what the S3 CSI driver needs to read it),
and that each bucket encrypted with a customer managed KMS key has that key named on its sources (`kms_key_arn`).

AWS calls time out after 4 s to connect and 8 s to read, 2 attempts each.
Exit 0 ready, 1 problems (each with its fix), 3 cannot check (no credentials, AWS unreachable, a malformed AWS
config file).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvtier.cli.common import add_env_options, add_json_option, load_from_args, print_checks, print_json

if TYPE_CHECKING:
    from kvtier.ops.preflight import PreflightReport


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
    from kvtier.ops.aws import announce
    from kvtier.ops.preflight import clients, collect, model_sources

    aws = clients(config.env, args.profile)
    announce(f"AWS in {config.env.region}", str(aws.cloudformation.meta.endpoint_url))
    report = collect(config.env, aws, config.model_buckets(), model_sources(config))
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
    return int(report.exit_code)


def print_report(report: PreflightReport) -> None:
    print_checks(
        f"kvtier preflight {report.environment} ({report.region})", report.checks, good="ready", bad="not ready"
    )
