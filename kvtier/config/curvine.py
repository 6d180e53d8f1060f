"""`curvine` section: the environment's L2 pool (masters on system nodes, one worker per GPU node)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from kvtier.config.base import StrictModel


def _odd(value: int) -> int:
    if value % 2 == 0:
        raise ValueError(f"{value} masters cannot form a Raft majority safely; use an odd count (1 in dev, 3 in prod)")
    return value


class CurvineConfig(StrictModel):
    masters: Annotated[int, Field(ge=1, le=7), AfterValidator(_odd)] = 1
    worker_data_gb: Annotated[int, Field(ge=10)] = 400  # per GPU node, on the instance-store NVMe
