"""When scheduled workloads send: a fixed rate, a Poisson process, or gamma-distributed gaps (burstiness).

Gaps between sends follow `vllm bench serve`'s definition (docs/references.md, "Benchmark metrics and arrivals"):
gamma with shape = burstiness and scale = 1 / (rate x burstiness), so the mean rate is `rate` whatever the
burstiness; burstiness 1 is exponential gaps (Poisson arrivals), below 1 burstier, above 1 more even. Unlike vLLM,
the sampled gaps are not rescaled to end at exactly count / rate: a duration-bounded run has no count to end at.
Seeded, so a run's schedule repeats with its --seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

Arrival = Literal["fixed", "poisson", "gamma"]
ARRIVALS: tuple[Arrival, ...] = ("fixed", "poisson", "gamma")


def send_offsets_ms(rate: float, arrival: Arrival = "fixed", burstiness: float = 1.0, seed: int = 0) -> Iterator[float]:
    """Send times in ms from the start, the first at 0, endless (the caller stops by count or duration)."""
    if not rate > 0:
        raise ValueError(f"rate {rate} must be above 0")
    if not burstiness > 0:
        raise ValueError(f"burstiness {burstiness} must be above 0")
    rng = random.Random(f"kvtier-bench-arrivals:{seed}")
    shape = 1.0 if arrival == "poisson" else burstiness
    at, count = 0.0, 0
    while True:
        yield count * 1000 / rate if arrival == "fixed" else at * 1000
        count += 1
        at += rng.gammavariate(shape, 1 / (rate * shape))
