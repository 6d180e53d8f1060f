"""Statistics the benchmark and the simulator both report, with one definition: below both (design "Layers")."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile by linear interpolation between closest ranks (numpy's default, Hyndman-Fan type 7)."""
    ordered = sorted(values)
    return ranked_percentile(len(ordered), q, ordered.__getitem__)


def ranked_percentile(count: int, q: float, ranked: Callable[[int], float]) -> float | None:
    """`percentile` of `count` values given the value of each 0-based rank (`ranked(0)` the smallest), for samples
    too large to sort into a list (kvtier/simulate/result.py)."""
    if not count:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    position = (count - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, count - 1)
    below = ranked(low)
    return below + (ranked(high) - below) * (position - low)
