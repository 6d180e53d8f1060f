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
- Existing cluster: sagemaker:DescribeCluster is InService and orchestrated by the configured EKS cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
)

from kvtier.addons import ADDONS, AddonSpec
from kvtier.config.environment import Environment
from kvtier.errors import UnavailableError
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
    return checks


# ---- reading -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clients:
    cloudformation: Any
    sts: Any
    service_quotas: Any
    ec2: Any
    eks: Any
    sagemaker: Any


def clients(env: Environment, profile: str | None = None) -> Clients:
    import boto3

    try:
        session = boto3.session.Session(profile_name=profile, region_name=env.region)
        return Clients(
            *(session.client(s) for s in ("cloudformation", "sts", "service-quotas", "ec2", "eks", "sagemaker"))
        )
    except (ProfileNotFound, NoRegionError) as err:
        raise UnavailableError(f"cannot check: {err}") from err


def collect(env: Environment, aws: Clients) -> PreflightReport:
    """Every check, in the order a deploy needs them. Raises UnavailableError when nothing can be checked."""
    checks = [_bootstrap(env, aws.cloudformation)]
    checks.append(_guard(lambda: [account_check(env, str(aws.sts.get_caller_identity()["Account"]))], "account"))
    if env.hyperpod.existing is None:  # an existing cluster's nodes are already there
        checks += _guard_many(lambda: quota_checks(env, _quotas(aws.service_quotas)), "quota", "SageMaker quotas")
    checks += _guard_many(
        lambda: zone_checks(env, aws.ec2.describe_availability_zones(AllAvailabilityZones=False)["AvailabilityZones"]),
        "zone",
        "availability zones",
    )
    for spec in addons_to_check(env):
        checks += _guard_many(_addon_reader(env, aws.eks, spec), "add-on", spec.name)
    existing = env.hyperpod.existing
    if existing is not None:
        arn = existing.hyperpod_cluster_arn
        checks += _guard_many(
            lambda: existing_cluster_check(env, aws.sagemaker.describe_cluster(ClusterName=arn)), "cluster", arn
        )
    return PreflightReport(env.name, env.region, tuple(checks))


def _bootstrap(env: Environment, cloudformation: Any) -> Check:
    try:
        stacks = cloudformation.describe_stacks(StackName=BOOTSTRAP_STACK).get("Stacks", [])
    except ClientError as err:
        if _code(err) == "ValidationError" and "does not exist" in _message(err):
            return bootstrap_check(env, None)
        _raise_if_unavailable(err)
        return Check("bootstrap", BOOTSTRAP_STACK, "unreadable", "unknown", _message(err))
    except (NoCredentialsError, PartialCredentialsError, EndpointConnectionError) as err:
        raise _unavailable(err, env) from err
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
    except (NoCredentialsError, PartialCredentialsError, EndpointConnectionError) as err:
        raise _unavailable(err, None) from err
    except ClientError as err:
        _raise_if_unavailable(err)
        return [Check(area, what or area, "unreadable", "unknown", _message(err))]
    except BotoCoreError as err:
        return [Check(area, what or area, "unreadable", "unknown", str(err))]


def _raise_if_unavailable(err: ClientError) -> None:
    if _code(err) in _CREDENTIAL_CODES:
        raise UnavailableError(f"cannot check: AWS refused the credentials ({_message(err)})") from err


def _unavailable(err: Exception, env: Environment | None) -> UnavailableError:
    if isinstance(err, EndpointConnectionError):
        where = f" in {env.region}" if env is not None else ""
        return UnavailableError(f"cannot check: cannot reach AWS{where} ({err})")
    return UnavailableError(
        f"cannot check: no AWS credentials ({err}); configure them (aws configure, AWS_PROFILE or --profile)"
    )


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _message(err: ClientError) -> str:
    error = err.response.get("Error", {})
    return f"{error.get('Code', 'Error')}: {error.get('Message', str(err))}"
