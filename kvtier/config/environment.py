"""The environment file (`environments/<env>.yaml`): one AWS account and region, one HyperPod cluster."""

from __future__ import annotations

import difflib
import math
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from kvtier.catalog import INSTANCE_TYPES, ZONE_LETTERS, InstanceType, with_overrides, zone_id_prefix, zone_names
from kvtier.config.base import FieldError, Items, StrictModel, rfc1123_label
from kvtier.config.curvine import CurvineConfig
from kvtier.config.eks import EksConfig
from kvtier.config.hyperpod import HyperPodConfig, InstanceGroup, Role
from kvtier.config.keda import KedaConfig
from kvtier.config.lob import LOB_NAME_MAX
from kvtier.config.network import NetworkConfig, plan_subnets
from kvtier.config.observability import ObservabilityConfig
from kvtier.versions import KUBERNETES_VERSION, UPGRADE_HINT

ENV_NAME_MAX = 12
_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$", re.ASCII)  # \d is Unicode without re.ASCII
_ACCOUNT = re.compile(r"^\d{12}$", re.ASCII)
_RESERVED_TAG_PREFIXES = ("aws:", "kvtier:")


def _region(value: str) -> str:
    if not _REGION.match(value):
        raise ValueError(f"'{value}' is not an AWS region name; write it like us-west-2")
    return value


def _account(value: str | None) -> str | None:
    if value is not None and not _ACCOUNT.match(value):
        raise ValueError(
            f"'{value}' is not an AWS account id; use 12 digits in quotes (\"123456789012\"), or null "
            "for an environment-agnostic synth"
        )
    return value


def _kubernetes_version(value: str) -> str:
    if value != KUBERNETES_VERSION:
        raise ValueError(f"Kubernetes '{value}' is not supported; use \"{KUBERNETES_VERSION}\" ({UPGRADE_HINT})")
    return value


# The tag character set AWS resources accept (AWS tagging docs: letters, spaces, digits, `_ . : / = + - @`).
_TAG_TEXT = re.compile(r"^[\w\s.:/=+\-@]*$")


def _tags(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        if not _TAG_TEXT.match(key) or not _TAG_TEXT.match(val):
            raise ValueError(
                f"tag '{key}: {val}' has characters AWS refuses; use letters, digits, spaces and _ . : / = + - @"
            )
        if not key:
            raise ValueError("a tag has an empty key; give every tag a key of 1-128 characters")
        if len(key) > 128 or len(val) > 256:
            raise ValueError(f"tag '{key}' is too long; keys have 1-128 characters and values at most 256")
        if key.lower().startswith(_RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag '{key}' uses a reserved prefix; 'aws:' belongs to AWS and 'kvtier:' to kvtier")
    if len(value) > 40:
        raise ValueError(f"{len(value)} tags given; use at most 40 (AWS allows 50 and kvtier adds its own)")
    return value


CatalogOverrides = dict[str, dict[str, float | int]]


# An AZ ID: the region's prefix, "-az", a number (https://docs.aws.amazon.com/ram/latest/userguide/working-with-az-ids.html).
_ZONE_ID = re.compile(r"[a-z]{2,4}[a-z]{1,2}[0-9]+-az[0-9]+")


class Environment(StrictModel):
    name: Annotated[str, rfc1123_label(ENV_NAME_MAX, "environment name (RFC 1123 label)")]
    region: Annotated[str, AfterValidator(_region)]
    account: Annotated[str | None, AfterValidator(_account)] = None
    availability_zones: Annotated[Items[str], Field(min_length=1, max_length=6)]  # 2+ for a new cluster
    kubernetes_version: Annotated[str, AfterValidator(_kubernetes_version)] = KUBERNETES_VERSION
    network: NetworkConfig = NetworkConfig()
    eks: EksConfig = EksConfig()
    hyperpod: HyperPodConfig
    catalog_overrides: CatalogOverrides = Field(default_factory=dict)
    curvine: CurvineConfig = CurvineConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    keda: KedaConfig = KedaConfig()  # standalone endpoints' autoscaling (kvtier/config/keda.py)
    # How the S3 CSI driver's role (cluster stack) may read LOB model buckets: `named` grants exactly the buckets the
    # LOB files name (a LOB with a new bucket redeploys the cluster stack first); `tagged` grants any bucket of the
    # account with S3 ABAC on and the environment's model-reader tag, so LOBs never change the cluster stack
    # (docs/lines-of-business.md "A new S3 model bucket").
    model_bucket_access: Literal["named", "tagged"] = "named"
    # A production-grade environment (issue 34): an engine image or an image with host access on GPU nodes (Curvine,
    # its CSI plugin and FUSE) given by tag, not by digest, is an error (a tag can be pushed again), a warning
    # elsewhere (kvtier/rules/images.py, docs/l2.md "Image digests").
    production: bool = False
    lobs: Items[Annotated[str, rfc1123_label(LOB_NAME_MAX, "line-of-business name (RFC 1123 label)")]] = ()
    tags: Annotated[dict[str, str], AfterValidator(_tags)] = Field(default_factory=dict)

    @property
    def zones_are_ids(self) -> bool:
        """True when `availability_zones` lists AZ IDs (usw2-az1), False for zone names (us-west-2a)."""
        return bool(self.availability_zones) and bool(_ZONE_ID.fullmatch(self.availability_zones[0]))

    def _check_zones(self) -> None:
        """Zone names of the region (catalog), or AZ IDs with the region's prefix; one kind, not both."""
        names = zone_names(self.region)
        if not names:  # a region no instance type of the catalog is offered in: the region is wrong, not its zones
            close = difflib.get_close_matches(self.region, sorted(ZONE_LETTERS), n=2, cutoff=0.6)
            raise FieldError(
                "region",
                f"'{self.region}' is not a region where HyperPod offers an instance type of kvtier's catalog",
                f"use one such as {' or '.join(close or ['us-west-2', 'us-east-1'])}",
            )
        prefix = zone_id_prefix(self.region)
        ids = self.zones_are_ids
        example = f"{self.region}a and {self.region}b" if not names else f"{names[0]} and {names[1 % len(names)]}"
        for i, az in enumerate(self.availability_zones):
            if ids:
                if not _ZONE_ID.fullmatch(az):
                    raise FieldError(
                        f"availability_zones[{i}]",
                        f"'{az}' is a zone name and availability_zones[0] is an AZ ID",
                        "list either zone names or AZ IDs, not both",
                    )
                if prefix is None or not az.startswith(prefix + "-"):
                    raise FieldError(
                        f"availability_zones[{i}]",
                        f"AZ ID '{az}' is not in region {self.region}",
                        f"use AZ IDs of {self.region}, like {prefix}-az1" if prefix else "use zone names",
                    )
            elif names and az not in names:
                raise FieldError(
                    f"availability_zones[{i}]",
                    f"zone '{az}' is not a zone of {self.region}",
                    f"use one of {', '.join(names)} (or AZ IDs like {prefix}-az1)",
                )
            elif not names and not re.fullmatch(re.escape(self.region) + r"[a-z]", az):
                raise FieldError(
                    f"availability_zones[{i}]",
                    f"zone '{az}' is not in region {self.region}",
                    f"use zones of {self.region}, like {example}",
                )

    @model_validator(mode="after")
    def _cross_fields(self) -> Environment:
        self._check_zones()
        if self.hyperpod.existing is None and len(self.availability_zones) < 2:
            raise FieldError(
                "availability_zones",
                f"{len(self.availability_zones)} zone given",
                "give at least 2: EKS needs subnets in two zones (one zone is fine for an existing cluster)",
            )
        if len(set(self.availability_zones)) != len(self.availability_zones):
            raise FieldError("availability_zones", "a zone is listed twice", "list each zone once")
        if plan_subnets(self.network.cidr, len(self.availability_zones), self.network.private_subnet_mask) is None:
            raise FieldError(
                "network.cidr",
                f"{self.network.cidr} cannot hold a public /24 and a private /{self.network.private_subnet_mask} "
                f"in each of {len(self.availability_zones)} zones",
                "use a larger cidr (smaller prefix) or a larger network.private_subnet_mask",
            )
        if self.network.nat_gateways > len(self.availability_zones):
            raise FieldError(
                "network.nat_gateways",
                f"{self.network.nat_gateways} NAT gateways for {len(self.availability_zones)} zones",
                "use at most one NAT gateway per zone",
            )
        for type_name, facts in self.catalog_overrides.items():
            if type_name not in INSTANCE_TYPES:
                raise FieldError(
                    f"catalog_overrides.{type_name}",
                    f"'{type_name}' is not in the catalog",
                    f"use one of {', '.join(sorted(INSTANCE_TYPES))}",
                )
            allowed = sorted(INSTANCE_TYPES[type_name].unverified)
            for fact, value in facts.items():
                if fact not in allowed:
                    raise FieldError(
                        f"catalog_overrides.{type_name}.{fact}",
                        "this fact is verified in the catalog and cannot be overridden",
                        f"overridable facts of {type_name}: {', '.join(allowed)}",
                    )
                if not math.isfinite(value) or value <= 0:
                    raise FieldError(
                        f"catalog_overrides.{type_name}.{fact}",
                        f"{value} is not a positive number",
                        "use a number above 0",
                    )
                if fact == "prefill_mfu" and value > 1:
                    raise FieldError(
                        f"catalog_overrides.{type_name}.{fact}",
                        f"{value} is more than the GPU's peak",
                        "use a fraction of the dense BF16 peak between 0 and 1 (0.5 is the default)",
                    )
        self._existing_cluster_checks()
        addon = self.observability.hyperpod_addon
        if addon is not None and addon.region != self.region:
            raise FieldError(
                "observability.hyperpod_addon.amp_workspace_arn",
                f"the workspace is in {addon.region}, the environment in {self.region}",
                f"use a workspace in {self.region} (the add-on writes to its own region)",
            )
        for i, lob in enumerate(self.lobs):
            if self.lobs.index(lob) != i:
                raise FieldError(f"lobs[{i}]", f"'{lob}' is listed twice", "list each line of business once")
        for i, group in enumerate(self.hyperpod.instance_groups):
            if self.region not in INSTANCE_TYPES[group.instance_type].regions:
                raise FieldError(
                    f"hyperpod.instance_groups[{i}].instance_type",
                    f"{group.instance_type} is not offered by HyperPod in {self.region} (cfn-lint's region list)",
                    "pick a region where it is offered, or another instance type",
                )
        return self

    @property
    def eks_cluster_name(self) -> str:
        return self.hyperpod.eks_cluster_name(self.name)

    def _existing_cluster_checks(self) -> None:
        existing = self.hyperpod.existing
        if existing is None:
            return
        if existing.region != self.region:
            raise FieldError(
                "hyperpod.existing.hyperpod_cluster_arn",
                f"the cluster is in {existing.region}, the environment in {self.region}",
                "set region to the cluster's region",
            )
        if self.account is not None and existing.account != self.account:
            raise FieldError(
                "hyperpod.existing.hyperpod_cluster_arn",
                f"the cluster is in account {existing.account}, the environment in {self.account}",
                "set account to the cluster's account",
            )
        for section in ("network", "eks"):
            if section in self.model_fields_set:
                raise FieldError(
                    section,
                    f"kvtier creates no {section} resources for an existing cluster",
                    f"remove the {section} section (the cluster's own settings apply)",
                )

    @property
    def hyperpod_cluster_name(self) -> str:
        return self.hyperpod.cluster_name or f"kvtier-{self.name}"

    def instance(self, type_name: str) -> InstanceType:
        """The catalog entry for `type_name` with this environment's overrides applied."""
        return with_overrides(INSTANCE_TYPES[type_name], self.catalog_overrides.get(type_name, {}))

    def groups(self, role: Role) -> tuple[InstanceGroup, ...]:
        return self.hyperpod.groups(role)
