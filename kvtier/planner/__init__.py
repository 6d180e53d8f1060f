"""Capacity and cost planning: what each cache tier holds, how fast it loads, what it costs."""

from kvtier.planner.model import TierModel
from kvtier.planner.tiers import tier_model

__all__ = ["TierModel", "tier_model"]
