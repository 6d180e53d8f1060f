"""The one way kvtier makes an S3 bucket: encrypted, TLS only, private, owned by the bucket owner."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_s3 as s3
from constructs import Construct


def private_bucket(scope: Construct, id: str, *, versioned: bool = False, bucket_name: str | None = None) -> s3.Bucket:
    """A bucket for objects kvtier (re)creates on every deploy, so it is emptied and deleted with its stack."""
    return s3.Bucket(
        scope,
        id,
        bucket_name=bucket_name,
        encryption=s3.BucketEncryption.S3_MANAGED,
        enforce_ssl=True,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        versioned=versioned,
        removal_policy=RemovalPolicy.DESTROY,
        auto_delete_objects=True,
    )
