"""`hyperpod` section: the HyperPod cluster and its instance groups."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.catalog import INSTANCE_TYPES
from kvtier.config.base import FieldError, Items, StrictModel

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


class HyperPodConfig(StrictModel):
    cluster_name: HyperPodName | None = None  # default kvtier-<env>
    instance_groups: Annotated[Items[InstanceGroup], Field(max_length=100)]
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    tiered_storage: TieredStorage = TieredStorage()

    @model_validator(mode="after")
    def _groups(self) -> HyperPodConfig:
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

    def groups(self, role: Role) -> tuple[InstanceGroup, ...]:
        return tuple(g for g in self.instance_groups if g.role == role)
