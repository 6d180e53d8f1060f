"""`hyperpod` section: the HyperPod cluster kvtier creates (its instance groups), or an existing one it imports."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.catalog import INSTANCE_TYPES
from kvtier.config.base import FieldError, Ipv4Cidr, Items, StrictModel
from kvtier.naming import eks_cluster_name

Role = Literal["system", "gpu"]
ROLE_LABEL = "kvtier.io/role"
# HyperPod name pattern for clusters and instance groups (reference aws-hyperpod.md 1.2, 1.3).
_HYPERPOD_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
DEFAULT_EBS_GB: dict[Role, int] = {"system": 100, "gpu": 500}


def _hyperpod_name(value: str) -> str:
    if not _HYPERPOD_NAME.match(value):
        raise ValueError(
            f"'{value}' is not a valid HyperPod name; use 1-63 letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


def _instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        raise ValueError(
            f"'{value}' is not an instance type HyperPod offers that kvtier supports; "
            f"use one of {', '.join(sorted(INSTANCE_TYPES))}"
        )
    return value


def _label_key(value: str) -> str:
    if not _LABEL_KEY.match(value) or len(value) > 253:
        raise ValueError(f"'{value}' is not a Kubernetes label key; use [prefix/]name with name up to 63 characters")
    return value


def _label_value(value: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"'{value}' is not a Kubernetes label value; use up to 63 letters, digits, '-', '_', '.'")
    return value


HyperPodName = Annotated[str, AfterValidator(_hyperpod_name)]
InstanceTypeName = Annotated[str, AfterValidator(_instance_type)]
LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


class Taint(StrictModel):
    key: LabelKey
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class InstanceGroup(StrictModel):
    name: HyperPodName
    role: Role
    instance_type: InstanceTypeName
    count: Annotated[int, Field(ge=1, le=6758)]
    ebs_gb: Annotated[int | None, Field(ge=1, le=16384)] = None  # default by role: DEFAULT_EBS_GB
    taints: Items[Taint] = ()

    @property
    def ebs_volume_gb(self) -> int:
        return self.ebs_gb if self.ebs_gb is not None else DEFAULT_EBS_GB[self.role]

    @model_validator(mode="after")
    def _role_matches_hardware(self) -> InstanceGroup:
        has_gpu = INSTANCE_TYPES[self.instance_type].is_gpu
        if self.role == "gpu" and not has_gpu:
            raise FieldError(
                "instance_type",
                f"a gpu group needs a GPU instance type and {self.instance_type} has none",
                "use an ml.g6e.* or ml.p5.48xlarge type",
            )
        if self.role == "system" and has_gpu:
            raise FieldError(
                "instance_type",
                f"a system group runs controllers only and {self.instance_type} is a GPU type",
                "use an ml.m5.* or ml.c5.* type",
            )
        return self


class TieredStorage(StrictModel):
    enabled: bool = True
    # 20-100: the AWS/Curvine blog's range for InstanceMemoryAllocationPercentage (schema allows 0-100).
    memory_percent: Annotated[int, Field(ge=20, le=100)] = 20


# ---- An existing cluster (kvtier imports it and creates no network or cluster resources) ---------------------------

Component = Literal["hyperpod_dependencies", "inference_operator", "kyverno", "curvine"]
# Add-on phases of kvtier.constructs.eks_addons that the cluster stack installs; `install.addons` may name a whole phase.
AddonGroup = Literal["network", "nodes"]
ADDON_GROUPS: tuple[AddonGroup, ...] = ("network", "nodes")
_ADDON_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Formats from the AWS API references (SageMaker DescribeCluster ClusterArn, EKS CreateCluster name, IAM ARNs).
_CLUSTER_ARN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:cluster/[a-z0-9]{12}$", re.ASCII)
_EKS_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_OIDC_ARN = re.compile(
    r"^arn:aws[a-z-]*:iam::\d{12}:oidc-provider/oidc\.eks\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/id/[A-Za-z0-9]+$", re.ASCII
)
# re.ASCII: IAM names are ASCII letters, digits and _+=,.@- (IAM API reference, CreateRole RoleName); Python's \w and \d
# would also accept other scripts' letters and digits.
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$", re.ASCII)
_VPC = re.compile(r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$")
_SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8}([0-9a-f]{9})?$")


def _matching(pattern: re.Pattern[str], what: str, example: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"'{value}' is not {what}; write it like {example}")
        return value

    return AfterValidator(check)


def _addon_name(value: str) -> str:
    if not _ADDON_NAME.match(value):
        raise ValueError(
            f"'{value}' is not an EKS add-on name; use a name like cert-manager, or a phase: {', '.join(ADDON_GROUPS)}"
        )
    return value


ClusterArn = Annotated[
    str,
    _matching(_CLUSTER_ARN, "a HyperPod cluster ARN", "arn:aws:sagemaker:us-west-2:111122223333:cluster/abcdef123456"),
]
EksClusterName = Annotated[str, _matching(_EKS_NAME, "an EKS cluster name", "ml-cluster-eks (1-100 characters)")]
OidcProviderArn = Annotated[
    str,
    _matching(
        _OIDC_ARN,
        "the ARN of an EKS cluster's IAM OIDC provider",
        "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/0123456789ABCDEF",
    ),
]
RoleArn = Annotated[str, _matching(_ROLE_ARN, "an IAM role ARN", "arn:aws:iam::111122223333:role/kvtier-kubectl")]
VpcId = Annotated[str, _matching(_VPC, "a VPC id", "vpc-0123456789abcdef0")]
SubnetId = Annotated[str, _matching(_SUBNET, "a subnet id", "subnet-0123456789abcdef0")]
SecurityGroupId = Annotated[str, _matching(_SECURITY_GROUP, "a security group id", "sg-0123456789abcdef0")]
AddonName = Annotated[str, AfterValidator(_addon_name)]


class ExistingGroup(StrictModel):
    """One of the owner's HyperPod instance groups whose nodes kvtier's pods may use."""

    name: HyperPodName
    instance_type: InstanceTypeName  # for sizing checks and Curvine's NVMe check
    count: Annotated[int, Field(ge=1, le=6758)]  # nodes kvtier plans with (status compares it to the live count)


class RoleNodes(StrictModel):
    """The nodes of one role: the label selector the owner already uses, their taints, and their groups."""

    selector: Annotated[dict[LabelKey, LabelValue], Field(min_length=1)]
    taints: Items[Taint] = ()  # kvtier's pods get a toleration for each
    groups: Annotated[Items[ExistingGroup], Field(min_length=1, max_length=100)]


class ExistingNodes(StrictModel):
    system: RoleNodes
    gpu: RoleNodes

    @model_validator(mode="after")
    def _hardware_and_names(self) -> ExistingNodes:
        if self.system.selector == self.gpu.selector:
            raise FieldError(
                "gpu.selector",
                "system and gpu nodes have the same selector",
                "give each role the selector of its own nodes (controllers and Curvine masters must stay off GPU nodes)",
            )
        seen: set[str] = set()
        roles: tuple[Role, ...] = ("system", "gpu")
        for role in roles:
            for i, group in enumerate(self.role(role).groups):
                if group.name in seen:
                    raise FieldError(
                        f"{role}.groups[{i}].name", f"group '{group.name}' is listed twice", "list each group once"
                    )
                seen.add(group.name)
                has_gpu = INSTANCE_TYPES[group.instance_type].is_gpu
                if has_gpu != (role == "gpu"):
                    raise FieldError(
                        f"{role}.groups[{i}].instance_type",
                        f"{group.instance_type} {'has' if has_gpu else 'has no'} GPU, so its group cannot have role {role}",
                        "list GPU groups under gpu and CPU groups (ml.m5.*, ml.c5.*) under system",
                    )
        return self

    def role(self, role: Role) -> RoleNodes:
        return self.system if role == "system" else self.gpu


class InstallSwitches(StrictModel):
    """What kvtier installs on an existing cluster (design: every component has an install switch). No defaults:
    the owner decides, because installing what is already there fails the deployment and skipping what is missing
    leaves endpoints without their dependencies."""

    addons: Items[AddonName]  # cluster-stack add-ons by name, or a whole phase ("network", "nodes"); [] for none
    hyperpod_dependencies: bool  # the HyperPod dependencies Helm chart (HyperPod needs it before nodes exist)
    inference_operator: bool  # the amazon-sagemaker-hyperpod-inference add-on and its roles (platform stack)
    kyverno: bool  # the Kyverno Helm release (platform stack); LOB policies need Kyverno either way
    curvine: bool  # Curvine masters, workers and CSI (platform stack)

    @model_validator(mode="after")
    def _unique(self) -> InstallSwitches:
        from kvtier.addons import ADDONS

        known = sorted(a.name for a in ADDONS if a.phase in ADDON_GROUPS)
        for i, name in enumerate(self.addons):
            if self.addons.index(name) != i:
                raise FieldError(f"addons[{i}]", f"'{name}' is listed twice", "list each add-on or phase once")
            if name not in known and name not in ADDON_GROUPS:
                raise FieldError(
                    f"addons[{i}]",
                    f"'{name}' is not an add-on of the cluster stack",
                    f"use a phase ({', '.join(ADDON_GROUPS)}) or one of {', '.join(known)}",
                )
        return self


class ExistingCluster(StrictModel):
    """A HyperPod cluster (EKS orchestrator) kvtier did not create: what CDK needs to manage Kubernetes objects on it."""

    hyperpod_cluster_arn: ClusterArn  # IAM scoping, the Tiered Storage custom resource, the operator add-on
    eks_cluster_name: EksClusterName
    oidc_provider_arn: OidcProviderArn  # IRSA roles of add-ons and the operator
    # null: kvtier creates the kubectl handler's role and gives it cluster-admin through an EKS access entry.
    # Set: the handler runs as this role (trusted by lambda.amazonaws.com, already cluster admin; docs/existing-clusters.md).
    kubectl_role_arn: RoleArn | None = None
    vpc_id: VpcId
    subnet_ids: Annotated[Items[SubnetId], Field(min_length=1, max_length=16)]  # private, with a route to the API
    security_group_id: SecurityGroupId  # for kvtier's Lambdas in the VPC: must reach the API endpoint on 443
    # Subnets the operator's load balancer uses: operator-mode engines accept traffic from them (NetworkPolicy).
    load_balancer_cidrs: Items[Ipv4Cidr] = ()
    nodes: ExistingNodes
    install: InstallSwitches

    @property
    def oidc_issuer(self) -> str:
        """`oidc.eks.<region>.amazonaws.com/id/<id>`, the prefix of IRSA condition keys."""
        return self.oidc_provider_arn.split(":oidc-provider/", 1)[1]

    @property
    def region(self) -> str:
        return self.hyperpod_cluster_arn.split(":")[3]

    @property
    def account(self) -> str:
        return self.hyperpod_cluster_arn.split(":")[4]

    @model_validator(mode="after")
    def _same_account(self) -> ExistingCluster:
        for field_name in ("oidc_provider_arn", "kubectl_role_arn"):
            arn = getattr(self, field_name)
            if arn is not None and arn.split(":")[4] != self.account:
                raise FieldError(
                    field_name,
                    f"account {arn.split(':')[4]} differs from the cluster's account {self.account}",
                    "use the cluster's account (kvtier deploys into one account)",
                )
        if f"oidc.eks.{self.region}." not in self.oidc_provider_arn:
            raise FieldError(
                "oidc_provider_arn",
                f"the provider is not in the cluster's region {self.region}",
                "use the OIDC provider of the EKS cluster named in eks_cluster_name",
            )
        return self


class HyperPodConfig(StrictModel):
    # The HyperPod cluster's name: default kvtier-<env> for a cluster kvtier creates; required for an existing one.
    cluster_name: HyperPodName | None = None
    instance_groups: Annotated[Items[InstanceGroup], Field(max_length=100)] = ()  # a cluster kvtier creates
    existing: ExistingCluster | None = None  # or a cluster kvtier imports (exactly one of the two)
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    tiered_storage: TieredStorage = TieredStorage()
    # HyperPod deep health checks (InstanceStress, about 2 hours per new GPU node; docs/deploying.md): on_create runs
    # them until the environment is marked established (`-c established=true`), always on every new or replacement
    # node, off never.
    deep_health_checks: Literal["on_create", "always", "off"] = "on_create"

    @model_validator(mode="after")
    def _groups(self) -> HyperPodConfig:
        if self.existing is not None:
            return self._existing_checks()
        if not self.instance_groups:
            raise FieldError(
                "instance_groups",
                "there are no instance groups",
                "list the groups kvtier creates, or describe a cluster kvtier did not create under `existing:`",
            )
        names = [g.name for g in self.instance_groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise FieldError("instance_groups", f"group names {dupes} are used twice", "give every group its own name")
        roles = {g.role for g in self.instance_groups}
        for role in ("system", "gpu"):
            if role not in roles:
                raise FieldError(
                    "instance_groups",
                    f"there is no instance group with role '{role}'",
                    "kvtier needs at least one 'system' group (controllers) and one 'gpu' group (vLLM, Curvine workers)",
                )
        return self

    def _existing_checks(self) -> HyperPodConfig:
        if "instance_groups" in self.model_fields_set:
            raise FieldError(
                "existing",
                "both instance_groups and existing are given",
                "use exactly one: instance_groups for a cluster kvtier creates, existing for one it imports",
            )
        if self.cluster_name is None:
            raise FieldError(
                "cluster_name",
                "an existing cluster needs its HyperPod cluster name",
                "set cluster_name to the name `aws sagemaker list-clusters` shows",
            )
        if "node_recovery" in self.model_fields_set:
            raise FieldError(
                "node_recovery",
                "kvtier does not change node recovery on an existing cluster (it passes the current value back)",
                "remove node_recovery; the owner sets it with `aws sagemaker update-cluster --node-recovery`",
            )
        return self

    def groups(self, role: Role) -> tuple[InstanceGroup, ...]:
        """Instance groups of `role`: kvtier's own, or the owner's groups of an existing cluster."""
        if self.existing is None:
            return tuple(g for g in self.instance_groups if g.role == role)
        nodes = self.existing.nodes.role(role)
        return tuple(
            InstanceGroup(name=g.name, role=role, instance_type=g.instance_type, count=g.count, taints=nodes.taints)
            for g in nodes.groups
        )

    def installs(self, component: Component) -> bool:
        """Whether kvtier installs `component` (always on a cluster it creates; per switch on an existing one)."""
        return self.existing is None or bool(getattr(self.existing.install, component))

    def installs_addon(self, name: str, phase: str) -> bool:
        """Whether the cluster stack installs the EKS add-on `name` of `phase` (kvtier.constructs.eks_addons)."""
        return self.existing is None or name in self.existing.install.addons or phase in self.existing.install.addons

    def eks_cluster_name(self, env_name: str) -> str:
        """The EKS cluster: `kvtier-<env>` when kvtier creates it, the owner's name otherwise."""
        return self.existing.eks_cluster_name if self.existing is not None else eks_cluster_name(env_name)
