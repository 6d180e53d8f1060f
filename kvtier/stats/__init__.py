"""Statistics the benchmark and the simulator both report, with one definition: below both (design "Layers")."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile by linear interpolation between closest ranks (numpy's default, Hyndman-Fan type 7)."""
    ordered = sorted(values)
    if not ordered:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
