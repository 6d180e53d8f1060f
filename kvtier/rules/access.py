"""Who can reach what: human access to the EKS API, and model buckets that would fall under kvtier's own."""

from __future__ import annotations

from fnmatch import fnmatchcase

from kvtier.config.endpoint import S3Model
from kvtier.errors import Problem
from kvtier.naming import own_bucket_patterns
from kvtier.rules.context import Context, Findings


def check_eks_access(ctx: Context, found: Findings) -> None:
    """For the cluster kvtier creates: a public API endpoint names who may reach it, and someone is admin."""
    if ctx.env.hyperpod.existing is not None:
        return  # the owner's cluster: its endpoint and access entries are not kvtier's
    eks = ctx.env.eks
    if eks.endpoint_access == "public_and_private" and not eks.public_access_cidrs:
        found.errors.append(
            Problem(
                ctx.env_file,
                "eks.public_access_cidrs",
                "the EKS API endpoint is public but no network is named to reach it (kvtier sets no 0.0.0.0/0 default)",
                "list the CIDRs people run kubectl from (e.g. [203.0.113.0/24]), or use endpoint_access: private",
            )
        )
    for index, cidr in enumerate(eks.public_access_cidrs):
        if eks.endpoint_access == "public_and_private" and cidr.endswith("/0"):  # 0.0.0.0/0 (strict CIDRs)
            found.warnings.append(
                Problem(
                    ctx.env_file,
                    f"eks.public_access_cidrs[{index}]",
                    f"{cidr} opens the EKS API endpoint to the whole internet (requests still need IAM credentials, "
                    "but anyone can reach and probe the endpoint)",
                    "list only the networks you run kubectl from, e.g. [203.0.113.0/24], or use endpoint_access: "
                    "private",
                )
            )
    for field, principals in (("admins", eks.admins), ("index_keyed_admins", eks.index_keyed_admins)):
        for index, arn in enumerate(principals):
            _check_admin(ctx, found, f"eks.{field}[{index}]", arn)
    if not eks.admins:
        found.warnings.append(
            Problem(
                ctx.env_file,
                "eks.admins",
                "no IAM principal gets cluster-admin access, so no person can use kubectl on this cluster",
                "list your platform team's role, e.g. admins: [arn:aws:iam::<account>:role/<name>]",
            )
        )


def partition(region: str) -> str:
    """The ARN partition of a region (AWS General Reference, "Amazon Resource Names": aws, aws-cn, aws-us-gov)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _check_admin(ctx: Context, found: Findings, field: str, arn: str) -> None:
    """The shape is checked by the config model; here the partition (an error: EKS refuses it after building the
    cluster) and the account (a warning: EKS takes a STANDARD entry's principal from another account, but preflight
    cannot read a role there)."""
    expected = partition(ctx.env.region)
    arn_partition, account = arn.split(":")[1], arn.split(":")[4]
    if arn_partition != expected:
        found.errors.append(
            Problem(
                ctx.env_file,
                field,
                f"'{arn}' is in partition {arn_partition}, but region {ctx.env.region} is in {expected}",
                f"use arn:{expected}:iam::<account>:role/<name>",
            )
        )
    elif ctx.env.account and account != ctx.env.account:
        found.warnings.append(
            Problem(
                ctx.env_file,
                field,
                f"'{arn}' is in account {account}, not the environment's {ctx.env.account} (EKS accepts it, but "
                "kvtier preflight cannot check that it exists)",
                f"use arn:{expected}:iam::{ctx.env.account}:role/<name>, or check the principal in account {account}",
            )
        )


def check_model_buckets(ctx: Context, found: Findings) -> None:
    """The S3 CSI driver is denied kvtier's own buckets (kvtier.constructs.eks_addons), so a model there cannot load."""
    patterns = own_bucket_patterns(ctx.env.name)
    for site in ctx.sites():
        model = site.endpoint.model
        if isinstance(model, S3Model) and any(fnmatchcase(model.bucket, p) for p in patterns):
            found.errors.append(
                Problem(
                    site.file,
                    site.at("model.bucket"),
                    f"'{model.bucket}' is named like a bucket kvtier creates ({' or '.join(patterns)}), which the "
                    "model readers are denied",
                    "keep model weights in a bucket of your own with another name",
                )
            )
        for index, adapter in enumerate(site.endpoint.adapters):  # LoRA adapters' buckets (issue 35), the same rule
            bucket = getattr(adapter.source, "bucket", None)
            if bucket is not None and any(fnmatchcase(bucket, p) for p in patterns):
                found.errors.append(
                    Problem(
                        site.file,
                        site.at(f"adapters[{index}].source.bucket"),
                        f"'{bucket}' is named like a bucket kvtier creates ({' or '.join(patterns)}), which the "
                        "model readers are denied",
                        "keep adapter weights in a bucket of your own with another name",
                    )
                )


def check_model_keys(ctx: Context, found: Findings) -> None:
    """A model or adapter source's SSE-KMS key (the shape is the config model's): in the environment's partition, or
    IAM grants nothing (an error); in the bucket's region, where S3 asks KMS for the reader (a warning: the grant's
    kms:ViaService names S3 in the bucket's region)."""
    expected = partition(ctx.env.region)
    for site in ctx.sites():
        for path, source in site.endpoint.s3_sources():
            key = source.kms_key_arn
            if key is None:
                continue
            key_partition, key_region = key.split(":")[1], key.split(":")[3]
            bucket_region = source.region or ctx.env.region
            field = site.at(f"{path}.kms_key_arn")
            if key_partition != expected:
                found.errors.append(
                    Problem(
                        site.file,
                        field,
                        f"'{key}' is in partition {key_partition}, but region {ctx.env.region} is in {expected}",
                        f"use arn:{expected}:kms:{bucket_region}:<account>:key/<key id>, the key of bucket "
                        f"{source.bucket}",
                    )
                )
            elif key_region != bucket_region:
                found.warnings.append(
                    Problem(
                        site.file,
                        field,
                        f"'{key}' is in region {key_region}, but bucket {source.bucket} is read in {bucket_region} "
                        "(the grant lets S3 there use the key)",
                        f"use the bucket's key (`aws s3api get-bucket-encryption --bucket {source.bucket}`), or set "
                        "the source's region to the bucket's",
                    )
                )
