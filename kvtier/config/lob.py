"""The line-of-business file (`lobs/<lob>.yaml`): one namespace, its GPU quota, its L2 budget, its endpoints."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from kvtier.config.base import FieldError, Items, StrictModel, rfc1123_label
from kvtier.config.endpoint import Endpoint, ModelShape
from kvtier.naming import RESERVED_LOB_NAMES

LOB_NAME_MAX = 20


class L2Budget(StrictModel):
    """The LOB's share of the Curvine pool, enforced by its janitor (Curvine itself evicts nothing)."""

    budget_gb: Annotated[float, Field(gt=0, le=1_000_000)] = 200.0  # decimal GB
    max_age_hours: Annotated[float, Field(gt=0, le=24 * 365)] = 24.0


class LineOfBusiness(StrictModel):
    name: Annotated[str, rfc1123_label(LOB_NAME_MAX, "line-of-business name (RFC 1123 label)")]
    gpu_quota: Annotated[int, Field(ge=1)]
    l2: L2Budget = L2Budget()
    # Shapes of models the catalog does not know, by model id (layers, KV heads, head dim, parameters).
    models: dict[str, ModelShape] = Field(default_factory=dict)
    # Not `min_length`: pydantic would add a second, misleading error whenever one endpoint is invalid.
    endpoints: Items[Endpoint]

    @model_validator(mode="after")
    def _checks(self) -> LineOfBusiness:
        if not self.endpoints:
            raise FieldError("endpoints", "the line of business has no endpoint", "list at least one endpoint")
        if self.name in RESERVED_LOB_NAMES:
            raise FieldError(
                "name",
                f"'{self.name}' is reserved for a stack kind",
                f"use a name other than {sorted(RESERVED_LOB_NAMES)}",
            )
        names = [e.name for e in self.endpoints]
        for i, name in enumerate(names):
            if names.index(name) != i:
                raise FieldError(f"endpoints[{i}].name", f"'{name}' is used twice", "give each endpoint its own name")
        return self
