"""`kvtier simulate`: replay a request trace through an endpoint's cache tiers and router before deploying it.

The engine consumes only `kvtier.planner.model.TierModel` (capacities, bandwidths, prefill speed) and a Mooncake
trace; the CLI gets the TierModel from the planner, so `plan` and `simulate` never disagree.
"""

from kvtier.simulate.engine import SimConfig, simulate
from kvtier.simulate.result import SimResult, TierTokens
from kvtier.simulate.routers import STRATEGIES
from kvtier.simulate.trace import to_units
from kvtier.trace import Trace, TraceRequest, load_trace, parse_trace

__all__ = [
    "STRATEGIES",
    "SimConfig",
    "SimResult",
    "TierTokens",
    "Trace",
    "TraceRequest",
    "load_trace",
    "parse_trace",
    "simulate",
    "to_units",
]
