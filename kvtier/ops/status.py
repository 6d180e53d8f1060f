"""`kvtier status`: the HyperPod cluster, its instance groups, Tiered Storage, node recovery and the EKS add-ons kvtier
expects, each with a verdict. Read-only: sagemaker:DescribeCluster, eks:DescribeCluster, eks:DescribeAddon, and cloudformation:ListStacks and
DescribeStacks for the environment's stacks the config no longer builds (a removed LOB keeps its stack running).

The checks are pure functions over the API responses (`hyperpod_checks`, `eks_check`, `addon_check`); `collect`
reads and maps failures to reach AWS onto UnavailableError (exit 3, "cannot check at all").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from kvtier.config.environment import Environment
from kvtier.config.hyperpod import Role
from kvtier.errors import UnavailableError
from kvtier.naming import ENV_TAG, stack_name
from kvtier.ops.aws import UNREACHABLE, client_config, session, unreachable
from kvtier.ops.checks import Check, ChecksReport, as_json
from kvtier.versions import KUBERNETES_VERSION

if TYPE_CHECKING:
    from mypy_boto3_eks import EKSClient
    from mypy_boto3_sagemaker import SageMakerClient

# Codes AWS returns when the credentials themselves are refused: nothing can be checked.
_CREDENTIAL_CODES = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "AccessDeniedException",
    }
)
_NOT_FOUND = frozenset({"ResourceNotFound", "ResourceNotFoundException"})


@dataclass(frozen=True)
class ExpectedAddon:
    """An EKS add-on kvtier's deployment relies on, from the registry in kvtier.constructs.eks_addons."""

    name: str
    version: str  # kvtier's pin
    installed_by_kvtier: bool
    # Configuration values kvtier relies on (e.g. vpc-cni's network policy switch, without which the LOBs'
    # NetworkPolicies are silently not enforced).
    configuration: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StatusReport(ChecksReport):
    environment: str
    hyperpod_cluster: str
    eks_cluster: str
    checks: tuple[Check, ...]

    @property
    def healthy(self) -> bool:
        return self.ok

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "hyperpod_cluster": self.hyperpod_cluster,
            "eks_cluster": self.eks_cluster,
            "healthy": self.healthy,
            "checks": as_json(self.checks),
        }


def hyperpod_target(env: Environment) -> str:
    """What DescribeCluster is called with: the configured ARN of an existing cluster, else kvtier's cluster name."""
    existing = env.hyperpod.existing
    return existing.hyperpod_cluster_arn if existing is not None else env.hyperpod_cluster_name


def expected_addons(env: Environment) -> list[ExpectedAddon]:
    """Every add-on of kvtier's registry, whoever installs it (on an existing cluster the owner may)."""
    from kvtier.addons import ADDONS

    return [
        ExpectedAddon(spec.name, spec.version, _kvtier_installs(env, spec.name, spec.phase), dict(spec.configuration))
        for spec in ADDONS
    ]


def _kvtier_installs(env: Environment, name: str, phase: str) -> bool:
    if phase == "platform":  # the platform stack's add-on: the Inference Operator
        return env.hyperpod.installs("inference_operator")
    return env.hyperpod.installs_addon(name, phase)


# ---- pure checks ---------------------------------------------------------------------------------------------------


def hyperpod_checks(env: Environment, described: Mapping[str, Any]) -> list[Check]:
    """Cluster status and identity, instance groups (current vs target), Tiered Storage, node recovery."""
    return [
        *_cluster_checks(env, described),
        *_group_checks(env, described.get("InstanceGroups", [])),
        _tiered_storage_check(env, described.get("TieredStorageConfig")),
        _node_recovery_check(env, described.get("NodeRecovery")),
    ]


def _cluster_checks(env: Environment, described: Mapping[str, Any]) -> list[Check]:
    name = str(described.get("ClusterName", env.hyperpod_cluster_name))
    status = str(described.get("ClusterStatus", "unknown"))
    detail = "" if status == "InService" else str(described.get("FailureMessage") or _STATUS_HINTS.get(status, ""))
    checks = [Check("cluster", name, status, "ok" if status == "InService" else "degraded", detail)]
    if env.hyperpod.existing is not None and name != env.hyperpod.cluster_name:
        checks.append(
            Check(
                "cluster",
                "name",
                name,
                "degraded",
                f"config says cluster_name {env.hyperpod.cluster_name} but the ARN names {name}",
            )
        )
    eks_arn = str(described.get("Orchestrator", {}).get("Eks", {}).get("ClusterArn", ""))
    eks_name = env.hyperpod.eks_cluster_name(env.name)
    if eks_arn and not eks_arn.endswith(f":cluster/{eks_name}"):
        checks.append(
            Check(
                "cluster",
                "orchestrator",
                eks_arn,
                "degraded",
                f"the HyperPod cluster is not orchestrated by {eks_name}",
            )
        )
    return checks


_STATUS_HINTS = {
    "Creating": "being created; run again later",
    "Updating": "an update is in progress; run again later",
    "SystemUpdating": "HyperPod is updating its software; run again later",
}


def _group_checks(env: Environment, groups: Sequence[Mapping[str, Any]]) -> list[Check]:
    roles: tuple[Role, ...] = ("system", "gpu")
    planned = {g.name: g for role in roles for g in env.groups(role)}
    live = {str(g.get("InstanceGroupName")): g for g in groups}
    checks: list[Check] = []
    for name, group in sorted(live.items()):
        current = int(group.get("CurrentCount", 0))
        target = int(group.get("TargetCount", current))
        status = str(group.get("Status", "unknown"))
        value = f"{current}/{target} nodes, {group.get('InstanceType', '?')}, {status}"
        if name not in planned:
            checks.append(Check("instance group", name, value, "ok", "not used by kvtier"))
            continue
        wanted = planned[name].count
        problems = []
        if status != "InService":
            problems.append(f"group is {status}")
        if current < target:
            # Continuous provisioning (kvtier's clusters) keeps the group InService and retries the missing nodes.
            provisioning = status in ("InService", "Creating", "Updating")
            problems.append(
                f"{target - current} of {target} nodes "
                + ("still provisioning (HyperPod retries until capacity is there)" if provisioning else "missing")
            )
        if problems:
            problems.append(f"events: aws sagemaker list-cluster-events --cluster-name {env.hyperpod_cluster_name}")
        if current < wanted:
            problems.append(f"kvtier plans with {wanted} nodes ({planned[name].role})")
        checks.append(Check("instance group", name, value, "degraded" if problems else "ok", "; ".join(problems)))
    for name in sorted(set(planned) - set(live)):
        checks.append(
            Check(
                "instance group",
                name,
                "absent",
                "degraded",
                f"configured ({planned[name].role}) but not in the cluster",
            )
        )
    return checks


def _tiered_storage_check(env: Environment, config: Mapping[str, Any] | None) -> Check:
    mode = str((config or {}).get("Mode", "Disable"))
    percent = (config or {}).get("InstanceMemoryAllocationPercentage")
    value = f"{mode}, {percent}% of memory" if mode == "Enable" and percent is not None else mode
    wanted = env.hyperpod.tiered_storage
    if not wanted.enabled:
        return Check("tiered storage", "TieredStorageConfig", value, "ok", "not asked for by kvtier")
    if mode != "Enable":
        return Check(
            "tiered storage",
            "TieredStorageConfig",
            value,
            "degraded",
            "kvtier asks for Enable: deploy the cluster stack",
        )
    if percent != wanted.memory_percent:
        return Check(
            "tiered storage",
            "TieredStorageConfig",
            value,
            "degraded",
            f"kvtier asks for {wanted.memory_percent}%: deploy the cluster stack",
        )
    return Check("tiered storage", "TieredStorageConfig", value, "ok")


def _node_recovery_check(env: Environment, value: str | None) -> Check:
    shown = value or "not reported"
    if env.hyperpod.existing is not None:
        return Check(
            "node recovery", "NodeRecovery", shown, "ok", "the owner's setting (kvtier passes it back unchanged)"
        )
    if value != env.hyperpod.node_recovery:
        return Check(
            "node recovery", "NodeRecovery", shown, "degraded", f"config asks for {env.hyperpod.node_recovery}"
        )
    return Check("node recovery", "NodeRecovery", shown, "ok")


def eks_check(name: str, cluster: Mapping[str, Any]) -> Check:
    status = str(cluster.get("status", "unknown"))
    version = str(cluster.get("version", "?"))
    problems = []
    if status != "ACTIVE":
        problems.append(f"cluster is {status}")
    if version != KUBERNETES_VERSION:
        problems.append(f"kvtier supports Kubernetes {KUBERNETES_VERSION} only")
    return Check("eks", name, f"{status}, Kubernetes {version}", "degraded" if problems else "ok", "; ".join(problems))


def addon_check(expected: ExpectedAddon, addon: Mapping[str, Any] | None, error: str = "") -> Check:
    """One add-on: `addon` is DescribeAddon's `addon`, None when EKS has no such add-on, or `error` when unreadable."""
    owner = "kvtier installs it" if expected.installed_by_kvtier else "kvtier expects it (install switch off)"
    if error:
        return Check("add-on", expected.name, "unreadable", "unknown", error)
    if addon is None:
        fix = (
            "deploy kvtier"
            if expected.installed_by_kvtier
            else "install it, or switch it on in hyperpod.existing.install"
        )
        return Check("add-on", expected.name, "not installed", "degraded", f"{owner}; {fix}")
    status = str(addon.get("status", "unknown"))
    version = str(addon.get("addonVersion", "?"))
    value = f"{version}, {status}"
    issues = [f"{i.get('code', '?')}: {i.get('message', '')}" for i in addon.get("health", {}).get("issues", [])]
    if status != "ACTIVE":
        return Check("add-on", expected.name, value, "degraded", "; ".join(issues) or f"add-on is {status}")
    if issues:
        return Check("add-on", expected.name, value, "degraded", "; ".join(issues))
    drift = _configuration_drift(expected.configuration, addon.get("configurationValues"))
    if drift:
        return Check("add-on", expected.name, value, "degraded", drift)
    if version != expected.version:
        if expected.installed_by_kvtier:
            return Check("add-on", expected.name, value, "degraded", f"kvtier pins {expected.version}: deploy kvtier")
        return Check("add-on", expected.name, value, "ok", f"the owner's version; kvtier pins {expected.version}")
    return Check("add-on", expected.name, value, "ok")


def _configuration_drift(wanted: Mapping[str, Any], live: str | None) -> str:
    """What differs between the configuration kvtier relies on and the add-on's (JSON or YAML) values."""
    if not wanted:
        return ""
    try:
        values = yaml.safe_load(live) if live else {}  # YAML is a superset of the JSON EKS echoes back
    except yaml.YAMLError:
        return "its configuration values cannot be read"
    values = values if isinstance(values, Mapping) else {}
    differ = [f"{k} is {values.get(k)!r}, kvtier needs {v!r}" for k, v in wanted.items() if values.get(k) != v]
    return "; ".join(differ)


def expected_stacks(env: Environment) -> set[str]:
    """The stack names the config builds (design "Stacks"): network (kvtier's own cluster only), cluster, platform,
    one per LOB."""
    kinds = ["cluster", "platform", *env.lobs]
    if env.hyperpod.existing is None:
        kinds.append("network")
    return {stack_name(env.name, kind) for kind in kinds}


def orphan_checks(env: Environment, live: Mapping[str, str]) -> list[Check]:
    """Stacks of this environment (`live`: name -> status) that the config no longer builds, e.g. a removed LOB: they
    keep running, and their GPUs stay held, until someone deletes them (`cdk deploy --all` never deletes a stack)."""
    expected = expected_stacks(env)
    return [
        Check(
            "stack",
            name,
            status,
            "degraded",
            f"not in the config any more; delete it when you no longer need it: aws cloudformation delete-stack "
            f"--region {env.region} --stack-name {name}",
        )
        for name, status in sorted(live.items())
        if name not in expected
    ]


def environment_stacks(env: Environment, cloudformation: Any) -> dict[str, str]:
    """Live stacks named `kvtier-<env>-*` that carry this environment's tag (another environment's name may extend
    this one's: `dev` and `dev-b`). ListStacks, then DescribeStacks only for names the config does not build."""
    prefix = stack_name(env.name, "")
    expected = expected_stacks(env)
    live: dict[str, str] = {}
    for page in cloudformation.get_paginator("list_stacks").paginate(StackStatusFilter=_LIVE_STACK_STATUSES):
        for summary in page.get("StackSummaries", []):
            name = str(summary["StackName"])
            if name.startswith(prefix):
                live[name] = str(summary["StackStatus"])
    for name in sorted(set(live) - expected):
        stacks = cloudformation.describe_stacks(StackName=name).get("Stacks", [])
        tags = {t["Key"]: t["Value"] for stack in stacks for t in stack.get("Tags", [])}
        if tags.get(ENV_TAG) != env.name:
            del live[name]
    return live


# Every ListStacks status but DELETE_COMPLETE (botocore cloudformation StackStatus).
_LIVE_STACK_STATUSES = [
    "CREATE_IN_PROGRESS",
    "CREATE_FAILED",
    "CREATE_COMPLETE",
    "ROLLBACK_IN_PROGRESS",
    "ROLLBACK_FAILED",
    "ROLLBACK_COMPLETE",
    "DELETE_IN_PROGRESS",
    "DELETE_FAILED",
    "UPDATE_IN_PROGRESS",
    "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_COMPLETE",
    "UPDATE_FAILED",
    "UPDATE_ROLLBACK_IN_PROGRESS",
    "UPDATE_ROLLBACK_FAILED",
    "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_ROLLBACK_COMPLETE",
    "REVIEW_IN_PROGRESS",
    "IMPORT_IN_PROGRESS",
    "IMPORT_COMPLETE",
    "IMPORT_ROLLBACK_IN_PROGRESS",
    "IMPORT_ROLLBACK_FAILED",
    "IMPORT_ROLLBACK_COMPLETE",
]


# ---- reading -------------------------------------------------------------------------------------------------------


def clients(env: Environment, profile: str | None = None) -> tuple[SageMakerClient, EKSClient]:
    aws = session(env.region, profile)
    return aws.client("sagemaker", config=client_config()), aws.client("eks", config=client_config())


def cloudformation_client(env: Environment, profile: str | None = None) -> Any:
    return session(env.region, profile).client("cloudformation", config=client_config())


def collect(
    env: Environment,
    sagemaker: SageMakerClient,
    eks: EKSClient,
    addons: Sequence[ExpectedAddon] | None = None,
    cloudformation: Any = None,
) -> StatusReport:
    """Read the cluster and its add-ons (default: `expected_addons`, loaded only once AWS answered), and with a
    CloudFormation client the environment's stacks the config no longer has. Raises UnavailableError when nothing can
    be checked."""
    target = hyperpod_target(env)
    eks_name = env.hyperpod.eks_cluster_name(env.name)
    described = _read(lambda: sagemaker.describe_cluster(ClusterName=target), f"HyperPod cluster {target}", env)
    checks = hyperpod_checks(env, described)
    eks_cluster = _read(lambda: eks.describe_cluster(name=eks_name), f"EKS cluster {eks_name}", env)["cluster"]
    checks.append(eks_check(eks_name, eks_cluster))
    for expected in expected_addons(env) if addons is None else addons:
        checks.append(_addon(eks, eks_name, expected))
    if cloudformation is not None:
        checks.extend(_orphans(env, cloudformation))
        if env.hyperpod.existing is None:
            checks.extend(_protection(env, cloudformation))
    return StatusReport(env.name, target, eks_name, tuple(checks))


def _orphans(env: Environment, cloudformation: Any) -> list[Check]:
    try:
        return orphan_checks(env, environment_stacks(env, cloudformation))
    except ClientError as err:
        return [Check("stack", stack_name(env.name, "*"), "unreadable", "unknown", _message(err))]
    except BotoCoreError as err:
        return [Check("stack", stack_name(env.name, "*"), "unreadable", "unknown", str(err))]


def protection_check(name: str, stack: Mapping[str, Any] | None) -> Check:
    """A network or cluster stack past its first create should be termination-protected (docs/deploying.md):
    UPDATE_* without protection means a deploy without `established` turned it off."""
    if stack is None:
        return Check("protection", name, "absent", "ok", "not deployed")
    status = str(stack.get("StackStatus", "?"))
    protected = bool(stack.get("EnableTerminationProtection", False))
    value = f"{'on' if protected else 'off'}, {status}"
    if protected:
        return Check("protection", name, value, "ok")
    if status.startswith("UPDATE_"):
        return Check(
            "protection",
            name,
            value,
            "degraded",
            "an established environment without termination protection (a deploy without -c established=true): "
            "persist it in cdk.context.json (docs/deploying.md) and deploy again",
        )
    return Check("protection", name, value, "ok", "first deploy: mark the environment established (docs/deploying.md)")


def _protection(env: Environment, cloudformation: Any) -> list[Check]:
    checks = []
    for kind in ("network", "cluster"):
        name = stack_name(env.name, kind)
        try:
            stacks = cloudformation.describe_stacks(StackName=name).get("Stacks", [])
        except ClientError as err:
            if _code(err) == "ValidationError" and "does not exist" in _message(err):
                stacks = []
            else:
                checks.append(Check("protection", name, "unreadable", "unknown", _message(err)))
                continue
        checks.append(protection_check(name, stacks[0] if stacks else None))
    return checks


def _addon(eks: EKSClient, cluster: str, expected: ExpectedAddon) -> Check:
    try:
        response = eks.describe_addon(clusterName=cluster, addonName=expected.name)
    except ClientError as err:
        if _code(err) in _NOT_FOUND:
            return addon_check(expected, None)
        return addon_check(expected, None, _message(err))
    except BotoCoreError as err:
        return addon_check(expected, None, str(err))
    return addon_check(expected, dict(response["addon"]))


def _read(call: Callable[[], Mapping[str, Any]], what: str, env: Environment) -> dict[str, Any]:
    try:
        return dict(call())
    except (NoCredentialsError, PartialCredentialsError) as err:
        raise UnavailableError(
            f"cannot check: no AWS credentials ({err}); configure them (aws configure, AWS_PROFILE or --profile)"
        ) from err
    except UNREACHABLE as err:
        raise unreachable(err, env.region) from err
    except ClientError as err:
        code = _code(err)
        if code in _NOT_FOUND:
            raise UnavailableError(f"cannot check: there is no {what} in {env.region} ({_message(err)})") from err
        if code in _CREDENTIAL_CODES:
            raise UnavailableError(f"cannot check: AWS refused the request for {what} ({_message(err)})") from err
        raise UnavailableError(f"cannot check {what}: {_message(err)}") from err
    except BotoCoreError as err:
        raise UnavailableError(f"cannot check {what}: {err}") from err


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _message(err: ClientError) -> str:
    error = err.response.get("Error", {})
    return f"{error.get('Code', 'Error')}: {error.get('Message', str(err))}"
