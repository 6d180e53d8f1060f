"""`eks` section: the EKS control plane."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, model_validator

from kvtier.config.base import FieldError, Ipv4Cidr, Items, StrictModel

# EKS access entries take IAM roles and users, not STS session ARNs (EKS API reference, CreateAccessEntry).
# re.ASCII: IAM names are ASCII (IAM API reference, CreateRole RoleName: alphanumerics and _+=,.@-).
# A path is `/`-separated segments; the name after the last `/` is never empty (`role/ops/` names no role).
_PRINCIPAL = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:(role|user)/([\w+=,.@-]+/)*[\w+=,.@-]+$", re.ASCII)


def _principal(value: str) -> str:
    if not _PRINCIPAL.match(value):
        raise ValueError(
            f"'{value}' is not an IAM principal ARN; use arn:aws:iam::<12-digit account>:role/<name> or :user/<name>"
        )
    return value


class EksConfig(StrictModel):
    # public_and_private: nodes use the private endpoint, people the public one (restrict it below);
    # private: reachable only from inside the VPC (deploy from a runner in the VPC or over a VPN).
    endpoint_access: Literal["public_and_private", "private"] = "public_and_private"
    # Required with a public endpoint (kvtier.rules.access): the networks people reach the EKS API from; no silent
    # 0.0.0.0/0 default.
    public_access_cidrs: Items[Ipv4Cidr] = ()
    admins: Items[Annotated[str, AfterValidator(_principal)]] = ()
    # Upgrade path (issue 37): kvtier before issue 37 keyed access entries by list position. An environment deployed
    # so lists its admins here once, in the order they were deployed; each keeps its entry's id, so the upgrade
    # replaces none (`kvtier validate --previous` prints the list to write). Never needed for a new environment.
    index_keyed_admins: Items[Annotated[str, AfterValidator(_principal)]] = ()

    @model_validator(mode="after")
    def _private_has_no_public_cidrs(self) -> EksConfig:
        for i, admin in enumerate(self.admins):
            if self.admins.index(admin) != i:
                raise FieldError(
                    f"admins[{i}]", f"'{admin}' is listed twice", "list each principal once (one access entry each)"
                )
        for i, admin in enumerate(self.index_keyed_admins):
            if self.index_keyed_admins.index(admin) != i:
                raise FieldError(
                    f"index_keyed_admins[{i}]",
                    f"'{admin}' is listed twice",
                    "list the admins once each, in the order they were deployed",
                )
        if self.endpoint_access == "private" and "public_access_cidrs" in self.model_fields_set:
            raise FieldError(
                "public_access_cidrs",
                "a private-only endpoint has no public access to restrict",
                "remove public_access_cidrs, or use endpoint_access: public_and_private",
            )
        return self
