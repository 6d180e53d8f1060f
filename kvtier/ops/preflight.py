"""`kvtier preflight`: is the account and region ready for the environment's first deploy? Read-only AWS calls only.

Each check is a pure function over API responses; `collect` reads them. A refused or missing credential, or AWS out of
reach, means nothing can be checked (UnavailableError, exit 3); any other API error makes that one check `unknown`.

- CDK bootstrap: cloudformation:DescribeStacks `CDKToolkit`, healthy and at least the version the templates require.
- Account: sts:GetCallerIdentity equals the config's `account` when one is set.
- Quotas (a cluster kvtier creates): servicequotas:ListServiceQuotas / ListAWSDefaultServiceQuotas for SageMaker, by
  the names AWS documents (docs/references.md): `<type> for cluster usage` per instance type, instances per cluster,
  instances across clusters, EBS volume size.
- Zones: ec2:DescribeAvailabilityZones; each configured zone (name or AZ ID) exists, is available, and its ID is shown.
- Add-ons: eks:DescribeAddonVersions for every add-on kvtier installs, at its pinned version, for the Kubernetes
  version; the HyperPod Inference add-on must be offered in the region at all.
- Instance types (a cluster kvtier creates): ec2:DescribeInstanceTypeOfferings by AZ ID; EC2 offers each group's
  type in every configured zone (a proxy: HyperPod's own capacity is not visible, but a zone without the EC2 type
  certainly fails).
- Leftovers (a cluster kvtier creates, before its cluster stack exists): the fixed names an earlier failed attempt
  leaves behind and a new create would collide with: HyperPod cluster (sagemaker:ListClusters), EKS cluster
  (eks:DescribeCluster), the Inference Operator's IAM roles (iam:GetRole), the lifecycle bucket (s3:HeadBucket).
- Existing cluster: sagemaker:DescribeCluster is InService, orchestrated by the configured EKS cluster, and has
  NodeRecovery set (the Tiered Storage update needs it); iam:GetOpenIDConnectProvider exists and matches
  eks:DescribeCluster's OIDC issuer (a wrong ARN fails every IRSA role at run time).
- Admins (a cluster kvtier creates): iam:GetRole / iam:GetUser for each `eks.admins` principal of the deploying
  account, by name; the ARN IAM returns must be the configured one (an IAM Identity Center `AWSReservedSSO_*` role
  given without its `aws-reserved/sso.amazonaws.com/` path is named with the ARN to use). EKS refuses a principal
  that does not exist only after the cluster is built, and the rollback deletes it again.
- Model buckets, with `model_bucket_access: tagged` (each S3 bucket a LOB file names): s3:GetBucketAbac is Enabled and s3control:ListTagsForResource
  shows the environment's model-reader tag, the two things the S3 CSI driver's role needs to read it (S3 ABAC,
  kvtier.constructs.eks_addons); the bucket's owner does them once per bucket, no stack does.
- Model keys (each S3 bucket a LOB file names, in either mode): s3:GetBucketEncryption; a bucket whose default
  encryption is SSE-KMS with a customer managed key needs that key as `kms_key_arn` on every model and adapter source
  in it, or the readers get no kms:Decrypt on it and every download is refused (issue 37). An API error is that
  bucket's `unknown`, naming the call.

Every client has short timeouts and few retries (CLIENT_CONFIG, docs/deploying.md): AWS out of reach fails in
seconds, not minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from kvtier.addons import ADDONS, AddonSpec
from kvtier.config.environment import Environment
from kvtier.config.loader import Config
from kvtier.errors import UnavailableError
from kvtier.naming import (
    MODEL_READER_TAG_VALUE,
    inference_role_names,
    lifecycle_bucket_prefix,
    model_reader_tag,
    stack_name,
)
from kvtier.ops.aws import UNREACHABLE, client_config, session, unreachable
from kvtier.ops.checks import Check, ChecksReport, as_json

BOOTSTRAP_STACK = "CDKToolkit"  # `cdk bootstrap`'s default stack name (qualifier hnb659fds)
# The synthesized templates' CheckBootstrapVersion rule refuses versions 1-5 (aws-cdk-lib DefaultStackSynthesizer).
MIN_BOOTSTRAP_VERSION = 6
_HEALTHY_STACK = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE"})
# Quota names as the HyperPod prerequisites page lists them (docs/references.md).
QUOTA_SERVICE = "sagemaker"
QUOTA_INSTANCE_TYPE = "{instance_type} for cluster usage"
QUOTA_PER_CLUSTER = "Maximum number instances allowed per SageMaker HyperPod cluster"
QUOTA_ACROSS_CLUSTERS = "Total number of instances allowed across SageMaker HyperPod clusters"
QUOTA_EBS_GB = "Maximum size of EBS volume in GB for a SageMaker HyperPod cluster instance"
INFERENCE_ADDON = "amazon-sagemaker-hyperpod-inference"
_CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
    }
)


@dataclass(frozen=True)
class Quota:
    name: str
    code: str
    value: float


@dataclass(frozen=True)
class PreflightReport(ChecksReport):
    environment: str
    region: str
    checks: tuple[Check, ...]

    @property
    def ready(self) -> bool:
        return self.ok

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "region": self.region,
            "ready": self.ready,
            "checks": as_json(self.checks),
        }


# ---- pure checks ---------------------------------------------------------------------------------------------------


def bootstrap_check(env: Environment, stack: Mapping[str, Any] | None) -> Check:
    """`stack`: DescribeStacks' entry for CDKToolkit, None when it does not exist."""
    where = f"aws://{env.account or '<account>'}/{env.region}"
    if stack is None:
        return Check("bootstrap", BOOTSTRAP_STACK, "absent", "problem", f"run `cdk bootstrap {where}` first")
    status = str(stack.get("StackStatus", "unknown"))
    outputs = {str(o.get("OutputKey")): str(o.get("OutputValue")) for o in stack.get("Outputs", [])}
    version = outputs.get("BootstrapVersion", "")
    value = f"{status}, version {version or '?'}"
    if status not in _HEALTHY_STACK:
        return Check("bootstrap", BOOTSTRAP_STACK, value, "problem", f"the bootstrap stack is {status}; fix it first")
    if not version.isdigit() or int(version) < MIN_BOOTSTRAP_VERSION:
        return Check(
            "bootstrap",
            BOOTSTRAP_STACK,
            value,
            "problem",
            f"kvtier's templates need bootstrap version {MIN_BOOTSTRAP_VERSION} or later: run `cdk bootstrap {where}`",
        )
    return Check("bootstrap", BOOTSTRAP_STACK, value, "ok")


def account_check(env: Environment, caller_account: str) -> Check:
    if env.account is None:
        return Check("account", "caller", caller_account, "ok", "the config names no account (environment-agnostic)")
    if caller_account != env.account:
        return Check(
            "account",
            "caller",
            caller_account,
            "problem",
            f"the config's account is {env.account}: use credentials of that account",
        )
    return Check("account", "caller", caller_account, "ok")


def quota_checks(env: Environment, quotas: Mapping[str, Quota]) -> list[Check]:
    """HyperPod quotas against a cluster kvtier creates; `quotas` by name (applied values, else AWS defaults).
    Quotas are account-wide: instances other clusters already use are not subtracted here."""
    groups = env.hyperpod.instance_groups
    if env.hyperpod.existing is not None or not groups:
        return []
    per_type: dict[str, int] = {}
    for group in groups:
        per_type[group.instance_type] = per_type.get(group.instance_type, 0) + group.count
    total = sum(per_type.values())
    wanted = [(QUOTA_INSTANCE_TYPE.format(instance_type=t), n, "instances") for t, n in sorted(per_type.items())]
    wanted += [
        (QUOTA_PER_CLUSTER, total, "instances in this cluster"),
        (QUOTA_ACROSS_CLUSTERS, total, "instances across clusters"),
        (QUOTA_EBS_GB, max(g.ebs_volume_gb for g in groups), "GB of EBS per instance"),
    ]
    return [_quota_check(name, need, unit, quotas.get(name), env.region) for name, need, unit in wanted]


def _quota_check(name: str, need: int, unit: str, quota: Quota | None, region: str) -> Check:
    if quota is None:
        return Check("quota", name, "not found", "unknown", f"Service Quotas lists no such SageMaker quota in {region}")
    value = f"{quota.value:g} ({quota.code}); needs {need} {unit}"
    if quota.value < need:
        return Check(
            "quota",
            name,
            value,
            "problem",
            f"request an increase to at least {need} (Service Quotas console, SageMaker, quota {quota.code})",
        )
    return Check("quota", name, value, "ok")


def zone_checks(env: Environment, zones: Iterable[Mapping[str, Any]]) -> list[Check]:
    """Each configured zone (name or AZ ID) among DescribeAvailabilityZones' zones, available, with both names."""
    by_name = {str(z.get("ZoneName")): z for z in zones}
    by_id = {str(z.get("ZoneId")): z for z in by_name.values()}
    checks = []
    for configured in env.availability_zones:
        zone = by_id.get(configured) or by_name.get(configured)
        if zone is None:
            known = ", ".join(f"{n} ({z.get('ZoneId')})" for n, z in sorted(by_name.items()))
            checks.append(
                Check("zone", configured, "absent", "problem", f"not a zone of {env.region} here; zones: {known}")
            )
            continue
        state = str(zone.get("State", "unknown"))
        value = f"{zone.get('ZoneName')} = {zone.get('ZoneId')}, {state}"
        if state != "available":
            checks.append(Check("zone", configured, value, "problem", f"the zone is {state}"))
        elif configured == zone.get("ZoneName"):
            detail = "zone names map to different AZ IDs per account: list AZ IDs to pin the physical zone"
            checks.append(Check("zone", configured, value, "ok", detail))
        else:
            checks.append(Check("zone", configured, value, "ok"))
    return checks


def addons_to_check(env: Environment) -> list[AddonSpec]:
    """The add-ons kvtier installs in this environment (on an existing cluster, only those switched on)."""
    specs = []
    for spec in ADDONS:
        installs = (
            env.hyperpod.installs("inference_operator")
            if spec.phase == "platform"
            else env.hyperpod.installs_addon(spec.name, spec.phase)
        )
        if installs:
            specs.append(spec)
    return specs


def addon_check(env: Environment, spec: AddonSpec, versions: Iterable[str]) -> Check:
    """`versions`: what DescribeAddonVersions offers for the add-on and the Kubernetes version."""
    offered = list(versions)
    k8s = env.kubernetes_version
    if not offered:
        where = f"in {env.region}" if spec.name == INFERENCE_ADDON else f"for Kubernetes {k8s} in {env.region}"
        return Check("add-on", spec.name, spec.version, "problem", f"EKS offers no version of this add-on {where}")
    if spec.version not in offered:
        newest = ", ".join(offered[:3])
        return Check(
            "add-on",
            spec.name,
            spec.version,
            "problem",
            f"EKS does not offer {spec.version} for Kubernetes {k8s} (offered: {newest}...); move the pin in "
            "kvtier/addons.py",
        )
    return Check("add-on", spec.name, spec.version, "ok", f"offered for Kubernetes {k8s}")


def existing_cluster_check(env: Environment, described: Mapping[str, Any]) -> list[Check]:
    existing = env.hyperpod.existing
    if existing is None:
        return []
    name = str(described.get("ClusterName", existing.hyperpod_cluster_arn))
    status = str(described.get("ClusterStatus", "unknown"))
    checks = [
        Check(
            "cluster",
            name,
            status,
            "ok" if status == "InService" else "problem",
            "" if status == "InService" else str(described.get("FailureMessage") or "wait until it is InService"),
        )
    ]
    orchestrator = described.get("Orchestrator", {}).get("Eks", {}).get("ClusterArn", "")
    if not orchestrator:
        checks.append(
            Check("cluster", "orchestrator", "none", "problem", "kvtier needs a HyperPod cluster orchestrated by EKS")
        )
    elif not str(orchestrator).endswith(f":cluster/{existing.eks_cluster_name}"):
        checks.append(
            Check(
                "cluster",
                "orchestrator",
                str(orchestrator),
                "problem",
                f"the config says EKS cluster {existing.eks_cluster_name}",
            )
        )
    else:
        checks.append(Check("cluster", "orchestrator", str(orchestrator), "ok"))
    if env.hyperpod.tiered_storage.enabled:
        recovery = described.get("NodeRecovery")
        if recovery is None:
            checks.append(
                Check(
                    "cluster",
                    "NodeRecovery",
                    "unset",
                    "problem",
                    "the Tiered Storage update must pass NodeRecovery back; set it once (`aws sagemaker update-cluster "
                    f"--cluster-name {name} --node-recovery Automatic`)",
                )
            )
        else:
            checks.append(Check("cluster", "NodeRecovery", str(recovery), "ok"))
    return checks


def ec2_instance_type(instance_type: str) -> str:
    """HyperPod's `ml.g6e.4xlarge` is EC2's `g6e.4xlarge`."""
    return instance_type.removeprefix("ml.")


def offering_checks(
    env: Environment, zones: Iterable[Mapping[str, Any]], offered: Mapping[str, set[str]]
) -> list[Check]:
    """Each instance group's type offered by EC2 in every configured zone. `offered`: EC2 type -> AZ IDs
    (DescribeInstanceTypeOfferings by availability-zone-id); zones that do not resolve are the zone check's."""
    by_name = {str(z.get("ZoneName")): str(z.get("ZoneId")) for z in zones}
    ids = set(by_name.values())
    wanted = [by_name.get(z, z) for z in env.availability_zones if z in by_name or z in ids]
    checks = []
    for instance_type in sorted({g.instance_type for g in env.hyperpod.instance_groups}):
        ec2_type = ec2_instance_type(instance_type)
        missing = [z for z in wanted if z not in offered.get(ec2_type, set())]
        value = f"{ec2_type} in {', '.join(wanted)}"
        if missing:
            checks.append(
                Check(
                    "instance type",
                    instance_type,
                    value,
                    "problem",
                    f"EC2 does not offer {ec2_type} in {', '.join(missing)}: HyperPod cannot place it there; list zones "
                    "that offer it (`aws ec2 describe-instance-type-offerings --location-type availability-zone-id "
                    f"--filters Name=instance-type,Values={ec2_type}`) and change `availability_zones`",
                )
            )
        else:
            checks.append(
                Check("instance type", instance_type, value, "ok", "offered by EC2 (HyperPod capacity is not visible)")
            )
    return checks


@dataclass(frozen=True)
class Leftovers:
    """What carries one of kvtier's fixed names before the environment's cluster stack exists."""

    hyperpod_clusters: tuple[tuple[str, str], ...] = ()  # (name, status)
    eks_status: str | None = None  # None: no such EKS cluster
    roles: tuple[str, ...] = ()
    bucket: str = ""
    bucket_state: str = "absent"  # absent | exists | foreign (the global name belongs to another account)


def leftover_names(env: Environment, account: str) -> tuple[str, tuple[str, ...], str]:
    """(cluster name, IAM role names, lifecycle bucket) a create of `env` uses (kvtier.naming)."""
    roles = tuple(sorted(inference_role_names(env.name, env.region).values()))
    return env.hyperpod_cluster_name, roles, f"{lifecycle_bucket_prefix(env.name)}{account}-{env.region}"


def leftover_checks(env: Environment, found: Leftovers | None) -> list[Check]:
    """`found` None: the cluster stack exists, so these names are its own."""
    stack = stack_name(env.name, "cluster")
    if found is None:
        return [Check("leftovers", stack, "exists", "ok", "a deployed environment: the fixed names are its own")]
    region = env.region
    checks = []
    for name, status in found.hyperpod_clusters:
        checks.append(
            Check(
                "leftovers",
                f"HyperPod cluster {name}",
                status,
                "problem",
                f"an earlier attempt left it; delete it (`aws sagemaker delete-cluster --region {region} "
                f"--cluster-name {name}`) and wait until it is gone",
            )
        )
    if found.eks_status is not None:
        checks.append(
            Check(
                "leftovers",
                f"EKS cluster {env.eks_cluster_name}",
                found.eks_status,
                "problem",
                f"an earlier attempt left it; delete it (`aws eks delete-cluster --region {region} --name "
                f"{env.eks_cluster_name}`, after its add-ons and access entries)",
            )
        )
    for role in found.roles:
        checks.append(
            Check(
                "leftovers",
                f"IAM role {role}",
                "exists",
                "problem",
                f"an earlier attempt left it; delete it (`aws iam delete-role --role-name {role}` after detaching its "
                "policies)",
            )
        )
    if found.bucket_state == "exists":
        checks.append(
            Check(
                "leftovers",
                f"bucket {found.bucket}",
                "exists",
                "problem",
                f"an earlier attempt left it; empty and delete it (`aws s3 rb --force s3://{found.bucket}`)",
            )
        )
    elif found.bucket_state == "foreign":
        checks.append(
            Check(
                "leftovers",
                f"bucket {found.bucket}",
                "another account's",
                "problem",
                "bucket names are global and this one belongs to another account: use another environment name",
            )
        )
    if not checks:
        checks.append(
            Check("leftovers", stack, "none", "ok", "no HyperPod or EKS cluster, role or bucket of this name")
        )
    return checks


def oidc_check(env: Environment, provider_url: str | None, issuer: str) -> Check:
    """byoc: the configured OIDC provider exists (`provider_url` None: it does not) and is the EKS cluster's issuer.
    IAM stores the URL without `https://`; EKS reports the issuer with it."""
    existing = env.hyperpod.existing
    arn = existing.oidc_provider_arn if existing is not None else ""
    if provider_url is None:
        return Check(
            "oidc",
            arn,
            "absent",
            "problem",
            "no such IAM OIDC provider: create it for the cluster (`eksctl utils associate-iam-oidc-provider "
            "--approve`) or fix `oidc_provider_arn`",
        )
    want = issuer.removeprefix("https://")
    if provider_url.removeprefix("https://") != want:
        return Check(
            "oidc",
            arn,
            provider_url,
            "problem",
            f"the EKS cluster's issuer is {want}: `oidc_provider_arn` must name that provider, or every IRSA role "
            "fails at run time",
        )
    return Check("oidc", arn, provider_url, "ok", "the EKS cluster's issuer")


def model_bucket_check(
    env: Environment, bucket: str, abac: str | None, tags: Mapping[str, str], account: str, partition: str = "aws"
) -> Check:
    """One LOB model bucket: `abac` is GetBucketAbac's Status (None: no such bucket), `tags` its bucket tags. The S3 CSI
    driver's role reads a bucket only with ABAC on and the environment's tag (S3 evaluates `aws:ResourceTag` only
    once ABAC is enabled; with ABAC on, tags are set with s3control TagResource, not PutBucketTagging)."""
    key = model_reader_tag(env.name)
    if abac is None:
        return Check(
            "model bucket",
            bucket,
            "absent",
            "problem",
            f"no bucket {bucket} in account {account}: create it and upload the weights, or fix `model.bucket`",
        )
    if abac != "Enabled":
        return Check(
            "model bucket",
            bucket,
            f"ABAC {abac or 'Disabled'}",
            "problem",
            f"the S3 CSI driver reads only buckets with ABAC on: `aws s3api put-bucket-abac --bucket {bucket} "
            "--abac-status Status=Enabled` (audit tag conditions in the bucket's other policies first), then tag it",
        )
    if tags.get(key) != MODEL_READER_TAG_VALUE:
        return Check(
            "model bucket",
            bucket,
            f"ABAC Enabled, {key}={tags.get(key, '<absent>')}",
            "problem",
            f"tag it for {env.name}'s S3 CSI driver: `aws s3control tag-resource --account-id {account} "
            f"--resource-arn arn:{partition}:s3:::{bucket} --tags Key={key},Value={MODEL_READER_TAG_VALUE}`",
        )
    return Check("model bucket", bucket, f"ABAC Enabled, {key}={MODEL_READER_TAG_VALUE}", "ok")


@dataclass(frozen=True)
class ModelSource:
    """An S3 model or adapter source as a LOB file writes it: its bucket, where it is written (file and field), and
    the SSE-KMS key it names (None: none)."""

    bucket: str
    where: str
    kms_key_arn: str | None


def model_sources(config: Config) -> list[ModelSource]:
    return [
        ModelSource(source.bucket, f"{config.files.get(lob.name, lob.name)} endpoints[{i}].{path}", source.kms_key_arn)
        for lob in config.lobs
        for i, endpoint in enumerate(lob.endpoints)
        for path, source in endpoint.s3_sources()
    ]


KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")  # S3 default encryption with KMS (SSE-KMS, DSSE-KMS)


def model_key_check(bucket: str, default: Mapping[str, Any] | None, sources: Sequence[ModelSource]) -> Check:
    """One model bucket's default encryption (GetBucketEncryption's ApplyServerSideEncryptionByDefault; None: no
    default) against the keys its sources name: a customer managed key must be named by each of them."""
    algorithm = str((default or {}).get("SSEAlgorithm", ""))
    key = str((default or {}).get("KMSMasterKeyID", ""))
    if algorithm not in KMS_ALGORITHMS:
        value = f"{algorithm or 'no default'} (SSE-S3)" if algorithm in ("", "AES256") else algorithm
        return Check("model key", bucket, value, "ok", "no KMS key to grant")
    if not key:
        return Check(
            "model key",
            bucket,
            f"{algorithm}, AWS managed key aws/s3",
            "ok",
            "usable through S3 by the bucket account's principals; a reader in another account cannot use it",
        )
    if key.startswith("alias/") or ":alias/" in key:
        return Check(
            "model key",
            bucket,
            key,
            "unknown",
            f"the bucket's default names an alias: `aws kms describe-key --key-id {key} --query KeyMetadata.Arn` "
            "gives the key ARN to list as kms_key_arn on its sources",
        )
    key_id = key.rsplit("/", 1)[-1]
    missing = [s for s in sources if s.kms_key_arn is None or s.kms_key_arn.rsplit("/", 1)[-1] != key_id]
    if not missing:
        return Check("model key", bucket, key, "ok", "granted to the readers (kms:Decrypt through S3)")
    arn = key if key.startswith("arn:") else f"<the ARN of key {key}: `aws kms describe-key --key-id {key}`>"
    first = missing[0]
    named = f"names {first.kms_key_arn}" if first.kms_key_arn else "names no key"
    more = f" (and {len(missing) - 1} more source(s) in this bucket)" if len(missing) > 1 else ""
    return Check(
        "model key",
        bucket,
        key,
        "problem",
        f"the bucket encrypts new objects with this KMS key; {first.where} {named}{more}: add `kms_key_arn: {arn}`, "
        "or the readers get no kms:Decrypt and every download is refused",
    )


SSO_ROLE_PREFIX = "AWSReservedSSO_"  # IAM Identity Center's roles (docs/references.md "Issue 37")
SSO_ROLE_PATH = "aws-reserved/sso.amazonaws.com/"


def admin_check(arn: str, found_arn: str | None, account: str) -> Check:
    """One `eks.admins` principal: `found_arn` is the ARN IAM returns for its name (None: no such role or user)."""
    kind, _, path_and_name = arn.split(":", 5)[5].partition("/")
    name = path_and_name.rsplit("/", 1)[-1]
    if found_arn is None:
        hint = ""
        if name.startswith(SSO_ROLE_PREFIX) and kind == "role":
            hint = (
                f"; an IAM Identity Center role is assigned per account (`aws iam get-role --role-name {name}` in "
                f"account {account}) and its ARN has the path role/{SSO_ROLE_PATH}..."
            )
        return Check(
            "admin",
            arn,
            "absent",
            "problem",
            f"no IAM {kind} {name} in account {account}: EKS refuses the access entry after the cluster is built{hint}",
        )
    if found_arn != arn:
        why = (
            f"an IAM Identity Center role's ARN includes its path ({SSO_ROLE_PATH}...)"
            if name.startswith(SSO_ROLE_PREFIX)
            else f"IAM's ARN of {kind} {name} is another one"
        )
        return Check("admin", arn, found_arn, "problem", f"{why}: list `{found_arn}` in eks.admins")
    return Check("admin", arn, f"{kind} exists", "ok")


# ---- reading -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clients:
    cloudformation: Any
    sts: Any
    service_quotas: Any
    ec2: Any
    eks: Any
    sagemaker: Any
    iam: Any
    s3: Any
    s3control: Any


SERVICES = ("cloudformation", "sts", "service-quotas", "ec2", "eks", "sagemaker", "iam", "s3", "s3control")


def clients(env: Environment, profile: str | None = None) -> Clients:
    aws = session(env.region, profile)
    config = client_config()
    try:
        return Clients(*(aws.client(s, config=config) for s in SERVICES))
    except BotoCoreError as err:  # a malformed ~/.aws/config, an unknown region: one line, exit 3
        raise UnavailableError(f"cannot check: {err}") from err


def collect(
    env: Environment, aws: Clients, model_buckets: Sequence[str] = (), sources: Sequence[ModelSource] = ()
) -> PreflightReport:
    """Every check, in the order a deploy needs them. Raises UnavailableError when nothing can be checked.
    `model_buckets`: the S3 buckets the LOB files name (Config.model_buckets); `sources`: their model and adapter
    sources (model_sources), whose KMS keys are checked against each bucket's default encryption."""
    checks = [_bootstrap(env, aws.cloudformation)]
    checks.append(_guard(lambda: [account_check(env, str(aws.sts.get_caller_identity()["Account"]))], "account"))
    if env.hyperpod.existing is None:  # an existing cluster's nodes are already there
        checks += _guard_many(lambda: quota_checks(env, _quotas(aws.service_quotas)), "quota", "SageMaker quotas")
    zones: list[Mapping[str, Any]] = []

    def read_zones() -> list[Check]:
        zones.extend(aws.ec2.describe_availability_zones(AllAvailabilityZones=False)["AvailabilityZones"])
        return zone_checks(env, zones)

    checks += _guard_many(read_zones, "zone", "availability zones")
    if env.hyperpod.existing is None:
        types = sorted({ec2_instance_type(g.instance_type) for g in env.hyperpod.instance_groups})
        checks += _guard_many(
            lambda: offering_checks(env, zones, _offerings(aws.ec2, types)), "instance type", "EC2 offerings"
        )
        checks += _guard_many(lambda: leftover_checks(env, _leftovers(env, aws)), "leftovers", "earlier attempts")
        checks += _admins(env, aws)
    for spec in addons_to_check(env):
        checks += _guard_many(_addon_reader(env, aws.eks, spec), "add-on", spec.name)
    existing = env.hyperpod.existing
    if existing is not None:
        arn = existing.hyperpod_cluster_arn
        checks += _guard_many(
            lambda: existing_cluster_check(env, aws.sagemaker.describe_cluster(ClusterName=arn)), "cluster", arn
        )
        checks += _guard_many(
            lambda: [_oidc(env, aws, existing.oidc_provider_arn, existing.eks_cluster_name)],
            "oidc",
            existing.oidc_provider_arn,
        )
    if env.model_bucket_access == "tagged":  # `named`: the cluster stack grants the buckets themselves
        for bucket in model_buckets:
            checks += _guard_many(_bucket_reader(env, aws, bucket), "model bucket", bucket)
    by_bucket: dict[str, list[ModelSource]] = {}
    for source in sources:
        by_bucket.setdefault(source.bucket, []).append(source)
    for bucket, in_bucket in sorted(by_bucket.items()):
        checks += _guard_many(_key_reader(aws, bucket, in_bucket), "model key", bucket)
    return PreflightReport(env.name, env.region, tuple(checks))


def _bootstrap(env: Environment, cloudformation: Any) -> Check:
    try:
        stacks = cloudformation.describe_stacks(StackName=BOOTSTRAP_STACK).get("Stacks", [])
    except ClientError as err:
        if _code(err) == "ValidationError" and "does not exist" in _message(err):
            return bootstrap_check(env, None)
        _raise_if_unavailable(err)
        return Check("bootstrap", BOOTSTRAP_STACK, "unreadable", "unknown", _message(err))
    except (NoCredentialsError, PartialCredentialsError) as err:
        raise _unavailable(err, env) from err
    except UNREACHABLE as err:
        raise unreachable(err, env.region) from err
    return bootstrap_check(env, stacks[0] if stacks else None)


def _quotas(service_quotas: Any) -> dict[str, Quota]:
    """Applied values where Service Quotas has them, else AWS's defaults (ListServiceQuotas omits quotas that were
    never applied)."""
    found: dict[str, Quota] = {}
    for operation in ("list_aws_default_service_quotas", "list_service_quotas"):  # applied values win
        for page in service_quotas.get_paginator(operation).paginate(ServiceCode=QUOTA_SERVICE):
            for quota in page.get("Quotas", []):
                name = str(quota.get("QuotaName", ""))
                found[name] = Quota(name, str(quota.get("QuotaCode", "?")), float(quota.get("Value", 0.0)))
    return found


def _offerings(ec2: Any, types: list[str]) -> dict[str, set[str]]:
    offered: dict[str, set[str]] = {t: set() for t in types}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": types}]
    )
    for page in pages:
        for offering in page.get("InstanceTypeOfferings", []):
            offered.setdefault(str(offering.get("InstanceType")), set()).add(str(offering.get("Location")))
    return offered


def _leftovers(env: Environment, aws: Clients) -> Leftovers | None:
    """None when the cluster stack exists (its names are its own); else what carries kvtier's fixed names."""
    try:
        aws.cloudformation.describe_stacks(StackName=stack_name(env.name, "cluster"))
        return None
    except ClientError as err:
        if not (_code(err) == "ValidationError" and "does not exist" in _message(err)):
            raise
    account = str(aws.sts.get_caller_identity()["Account"])
    cluster, roles, bucket = leftover_names(env, account)
    summaries = aws.sagemaker.list_clusters(NameContains=cluster).get("ClusterSummaries", [])
    clusters = tuple(
        (str(c["ClusterName"]), str(c.get("ClusterStatus", "?"))) for c in summaries if c.get("ClusterName") == cluster
    )
    eks_status = None
    try:
        eks_status = str(aws.eks.describe_cluster(name=env.eks_cluster_name)["cluster"].get("status", "?"))
    except ClientError as err:
        if _code(err) != "ResourceNotFoundException":
            raise
    found_roles = []
    for role in roles:
        try:
            aws.iam.get_role(RoleName=role)
            found_roles.append(role)
        except ClientError as err:
            if _code(err) != "NoSuchEntity":
                raise
    state = "exists"
    try:
        aws.s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=account)
    except ClientError as err:
        code = _code(err)
        if code in ("404", "NoSuchBucket", "NotFound"):
            state = "absent"
        elif code in ("403", "AccessDenied", "Forbidden"):
            state = "foreign"  # HeadBucket with ExpectedBucketOwner answers 403 for another account's bucket
        else:
            raise
    return Leftovers(clusters, eks_status, tuple(found_roles), bucket, state)


def _admins(env: Environment, aws: Clients) -> list[Check]:
    """One check per admin; an API error is that admin's `unknown`, naming the call that failed."""

    def read() -> list[Check]:
        account = env.account or str(aws.sts.get_caller_identity()["Account"])
        return [_admin(aws, arn, account) for arn in env.eks.admins]

    return _guard_many(read, "admin", "eks.admins") if env.eks.admins else []


def _admin(aws: Clients, arn: str, account: str) -> Check:
    fields = arn.split(":", 5)
    if fields[4] != account:
        return Check(
            "admin", arn, f"account {fields[4]}", "unknown", f"not checked: preflight reads account {account} only"
        )
    kind, _, path_and_name = fields[5].partition("/")
    name = path_and_name.rsplit("/", 1)[-1]
    call = "iam:GetRole" if kind == "role" else "iam:GetUser"
    try:
        if kind == "role":
            found: str | None = str(aws.iam.get_role(RoleName=name)["Role"]["Arn"])
        else:
            found = str(aws.iam.get_user(UserName=name)["User"]["Arn"])
    except ClientError as err:
        if _code(err) != "NoSuchEntity":
            _raise_if_unavailable(err)
            return Check("admin", arn, "unreadable", "unknown", f"{call}: {_message(err)}")
        found = None
    return admin_check(arn, found, account)


def _oidc(env: Environment, aws: Clients, provider_arn: str, eks_cluster: str) -> Check:
    issuer = str(
        aws.eks.describe_cluster(name=eks_cluster)["cluster"].get("identity", {}).get("oidc", {}).get("issuer", "")
    )
    try:
        url: str | None = str(aws.iam.get_open_id_connect_provider(OpenIDConnectProviderArn=provider_arn)["Url"])
    except ClientError as err:
        if _code(err) != "NoSuchEntity":
            raise
        url = None
    return oidc_check(env, url, issuer)


def _bucket_reader(env: Environment, aws: Clients, bucket: str) -> Callable[[], list[Check]]:
    return lambda: [_model_bucket(env, aws, bucket)]


def _model_bucket(env: Environment, aws: Clients, bucket: str) -> Check:
    account = str(aws.sts.get_caller_identity()["Account"])
    try:
        abac = aws.s3.get_bucket_abac(Bucket=bucket, ExpectedBucketOwner=account).get("AbacStatus", {})
    except ClientError as err:
        if _code(err) not in ("NoSuchBucket", "404", "NotFound"):
            raise  # AccessDenied (also another account's bucket, with ExpectedBucketOwner): unknown, with AWS's words
        return model_bucket_check(env, bucket, None, {}, account)
    status = str(abac.get("Status", ""))
    partition = str(aws.s3.meta.partition)
    tags: dict[str, str] = {}
    if status == "Enabled":  # the tags matter only then (S3 ignores aws:ResourceTag on a bucket with ABAC off)
        arn = f"arn:{partition}:s3:::{bucket}"
        listed = aws.s3control.list_tags_for_resource(AccountId=account, ResourceArn=arn).get("Tags", [])
        tags = {str(t.get("Key")): str(t.get("Value")) for t in listed}
    return model_bucket_check(env, bucket, status, tags, account, partition)


def _key_reader(aws: Clients, bucket: str, sources: Sequence[ModelSource]) -> Callable[[], list[Check]]:
    return lambda: [_model_key(aws, bucket, sources)]


def _model_key(aws: Clients, bucket: str, sources: Sequence[ModelSource]) -> Check:
    """GetBucketEncryption of one bucket (its owner may be another account: no ExpectedBucketOwner)."""
    try:
        rules = aws.s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"].get("Rules", [])
    except ClientError as err:
        code = _code(err)
        if code == "ServerSideEncryptionConfigurationNotFoundError":
            return model_key_check(bucket, None, sources)
        if code in ("NoSuchBucket", "404", "NotFound"):
            return Check("model key", bucket, "absent", "problem", f"no bucket {bucket}: fix {sources[0].where}")
        _raise_if_unavailable(err)
        return Check("model key", bucket, "unreadable", "unknown", f"s3:GetBucketEncryption: {_message(err)}")
    default = rules[0].get("ApplyServerSideEncryptionByDefault") if rules else None
    return model_key_check(bucket, default, sources)


def _addon_reader(env: Environment, eks: Any, spec: AddonSpec) -> Callable[[], list[Check]]:
    return lambda: [addon_check(env, spec, _addon_versions(eks, env, spec))]


def _addon_versions(eks: Any, env: Environment, spec: AddonSpec) -> list[str]:
    versions: list[str] = []
    pages = eks.get_paginator("describe_addon_versions").paginate(
        addonName=spec.name, kubernetesVersion=env.kubernetes_version
    )
    for page in pages:
        for addon in page.get("addons", []):
            versions += [str(v.get("addonVersion")) for v in addon.get("addonVersions", [])]
    return versions


def _guard(read: Callable[[], list[Check]], area: str, what: str = "") -> Check:
    return _guard_many(read, area, what)[0]


def _guard_many(read: Callable[[], list[Check]], area: str, what: str) -> list[Check]:
    """Run one read: credentials or reachability problems stop everything; other API errors make it `unknown`."""
    try:
        return read()
    except (NoCredentialsError, PartialCredentialsError) as err:
        raise _unavailable(err, None) from err
    except UNREACHABLE as err:
        raise unreachable(err, "the region") from err
    except ClientError as err:
        _raise_if_unavailable(err)
        return [Check(area, what or area, "unreadable", "unknown", _message(err))]
    except BotoCoreError as err:
        return [Check(area, what or area, "unreadable", "unknown", str(err))]


def _raise_if_unavailable(err: ClientError) -> None:
    if _code(err) in _CREDENTIAL_CODES:
        raise UnavailableError(f"cannot check: AWS refused the credentials ({_message(err)})") from err


def _unavailable(err: Exception, env: Environment | None) -> UnavailableError:
    if isinstance(err, UNREACHABLE):
        return unreachable(err, env.region if env is not None else "the region")
    return UnavailableError(
        f"cannot check: no AWS credentials ({err}); configure them (aws configure, AWS_PROFILE or --profile)"
    )


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _message(err: ClientError) -> str:
    error = err.response.get("Error", {})
    return f"{error.get('Code', 'Error')}: {error.get('Message', str(err))}"
