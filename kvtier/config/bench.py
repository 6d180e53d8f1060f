"""`bench` of an endpoint: the in-cluster benchmark Job (off unless enabled)."""

from __future__ import annotations

from kvtier.config.base import StrictModel


class BenchConfig(StrictModel):
    enabled: bool = False
