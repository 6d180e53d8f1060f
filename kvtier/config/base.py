"""Shared pieces of the configuration model: a strict base class and reusable field checks."""

from __future__ import annotations

import re
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Strict

T = TypeVar("T")
# YAML gives lists; models keep immutable tuples. Items stay strict.
Items = Annotated[tuple[T, ...], Strict(False)]

RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class StrictModel(BaseModel):
    """Unknown keys are errors, types are not coerced ("2" is not 2), numbers are finite (YAML's .inf and .nan are
    refused), and loaded values never change."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def rfc1123_label(max_len: int, what: str) -> AfterValidator:
    def check(value: str) -> str:
        if len(value) > max_len:
            raise ValueError(f"'{value}' has {len(value)} characters; use at most {max_len} for the {what}")
        if not RFC1123_LABEL.match(value):
            raise ValueError(
                f"'{value}' is not a valid {what}; use lowercase letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
        return value

    return AfterValidator(check)


def _ipv4_cidr(value: str) -> str:
    import ipaddress

    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError as err:
        raise ValueError(f"'{value}' is not an IPv4 CIDR ({err}); write it like 203.0.113.0/24") from None
    return value


Ipv4Cidr = Annotated[str, AfterValidator(_ipv4_cidr)]


# registry/path:tag or @sha256 digest; an image without a tag would silently mean :latest.
_IMAGE = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[a-f0-9]{64})?|@sha256:[a-f0-9]{64})$"
)


def _pinned_image(value: str) -> str:
    if not _IMAGE.match(value):
        raise ValueError(
            f"'{value}' is not a pinned container image; write registry/repository:tag (or @sha256:<digest>), "
            "never without a tag"
        )
    if value.rsplit("/", 1)[-1].split("@", maxsplit=1)[0].endswith(":latest"):
        raise ValueError(f"'{value}' uses the moving tag 'latest'; pin a release tag (or a digest)")
    return value


PinnedImage = Annotated[str, AfterValidator(_pinned_image)]

DIGEST_MARK = "@sha256:"


def image_digest(image: str) -> str | None:
    """`sha256:<hex>` of an image given by digest (`repo:tag@sha256:...` or `repo@sha256:...`), else None."""
    return image[image.index(DIGEST_MARK) + 1 :] if DIGEST_MARK in image else None


def image_by_tag(image: str) -> str:
    """The image without its digest: `repo:tag` (what a tag-keyed table knows it by)."""
    return image.split(DIGEST_MARK, 1)[0]


def image_content(image: str) -> str:
    """What names an image's bits: `repo@sha256:<hex>` when a digest is given (the tag then says nothing more, and a
    tag can be pushed again), else the tag as written."""
    digest = image_digest(image)
    if digest is None:
        return image
    repository = image_by_tag(image)
    last = repository.rsplit("/", 1)
    if ":" in last[-1]:  # drop the tag (a registry's `:port` sits before the last `/`)
        repository = repository[: repository.rindex(":")]
    return f"{repository}@{digest}"


# An SSE-KMS key as IAM grants it: a key ARN (a key id or a multi-Region `mrk-` id), never an alias or a bare key id:
# a grant on an alias ARN covers the alias, not the key (docs/references.md "Issue 37"). The partition is checked
# against the environment's region by kvtier.rules.access.
_KMS_KEY = re.compile(
    r"^arn:aws(-[a-z]+)*:kms:[a-z]+(-[a-z]+)+-\d+:\d{12}:key/"
    r"(mrk-[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$",
    re.ASCII,
)


def _kms_key(value: str | None) -> str | None:
    if value is None or _KMS_KEY.match(value):
        return value
    if ":alias/" in value or value.startswith("alias/"):
        raise ValueError(
            f"'{value}' is an alias; IAM grants a key, not its alias: use the key's ARN "
            f"(`aws kms describe-key --key-id {value} --query KeyMetadata.Arn`)"
        )
    raise ValueError(
        f"'{value}' is not a KMS key ARN; use arn:aws:kms:<region>:<12-digit account>:key/<key id> "
        "(the bucket's default key: `aws s3api get-bucket-encryption --bucket <bucket>`)"
    )


KmsKeyArn = Annotated[str | None, AfterValidator(_kms_key)]


def positive(value: int | float) -> int | float:
    if value <= 0:
        raise ValueError(f"{value} is not positive; use a number greater than 0")
    return value


PositiveInt = Annotated[int, AfterValidator(positive)]
PositiveFloat = Annotated[float, AfterValidator(positive)]


class FieldError(ValueError):
    """A model-level check that knows which field is wrong: `at` is a path relative to the model."""

    def __init__(self, at: str, problem: str, allowed: str) -> None:
        self.at = at
        self.problem = problem
        self.allowed = allowed
        super().__init__(f"{problem}; {allowed}")
