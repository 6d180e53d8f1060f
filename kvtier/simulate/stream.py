"""Several replays over one pass of a trace: each request is read, checked, mapped onto units and fed to every run
(routing strategies and tier sizes) before the next is read, so the trace is parsed once and never held in memory;
what a replay keeps is its tiers and the requests queued or running.

A replay needs requests in arrival order. Mooncake traces are sorted by time; a trace that is not (a timestamp
earlier than the line before) stops the pass with `OutOfOrderError`, and the caller replays it sorted in memory
(`replay_sorted`), as the simulator always has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from kvtier.planner.model import TierModel
from kvtier.simulate.engine import Replay, SimConfig, check_model
from kvtier.simulate.result import SimResult
from kvtier.simulate.trace import LateArrivalError, Request, UnitMapper
from kvtier.trace import MOONCAKE_BLOCK_TOKENS, Row


class OutOfOrderError(Exception):
    """The trace goes back in time at `line`: it cannot be replayed as it is read."""

    def __init__(self, line: int) -> None:
        super().__init__(f"line {line} is earlier than the line before it")
        self.line = line


def replay_stream(
    rows: Iterable[Row],
    runs: Sequence[tuple[TierModel, SimConfig]],
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    source: str = "",
    max_units: float = math.inf,
) -> list[SimResult]:
    """Replay every (tier model, settings) run over `rows`, read once in file order; the results in the order of
    `runs`. OutOfOrderError when a row is earlier than the one before it. `max_units`: at least the distinct units
    the rows can name (`units_bound`), so a tier that large keeps no order of use (kvtier/simulate/cache.py)."""
    for model, _ in runs:
        check_model(model)
    # One mapping per (chunk size, rate) the runs use: sweeps of tier sizes share one.
    groups: dict[tuple[int, float], tuple[UnitMapper, list[Callable[[Request], None]]]] = {}
    replays: list[Replay] = []
    for model, config in runs:
        key = (model.chunk_tokens, config.qps_scale)
        if key not in groups:
            groups[key] = (UnitMapper(model.chunk_tokens, block_tokens, config.qps_scale, source), [])
        mapper, feeds = groups[key]
        replay = Replay(model, config, mapper.unit_tokens, max_units=max_units)
        replays.append(replay)
        feeds.append(replay.feed)
    pairs = list(groups.values())
    last = 0.0
    remaining = iter(rows)
    for row in remaining:
        if row[0] < last:
            raise OutOfOrderError(row[4])
        last = row[0]
        for mapper, feeds in pairs:
            try:
                request = mapper(row)
            except LateArrivalError:
                # Named as the whole trace's latest request (the last of equals), as when it was read first.
                latest = row
                for later in remaining:
                    if later[0] >= latest[0]:
                        latest = later
                mapper.refuse_late(latest)
            for feed in feeds:
                feed(request)
    return [replay.result() for replay in replays]


def replay_sorted(
    rows: Iterable[Row],
    runs: Sequence[tuple[TierModel, SimConfig]],
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    source: str = "",
) -> list[SimResult]:
    """`replay_stream` over the rows sorted by time (stable: equal times keep file order), held in memory."""
    ordered = sorted(rows, key=lambda row: row[0])
    bound = sum(len(row[3]) + 1 for row in ordered)
    return replay_stream(ordered, runs, block_tokens=block_tokens, source=source, max_units=bound)


def units_bound(file_bytes: int) -> float:
    """At least the distinct cache keys a trace file of `file_bytes` bytes can name: each of its ids, and the one
    partial-chunk key a request may add (kvtier/simulate/engine.py), takes a byte of the file or more (an id is a
    digit and a separator; a line is dozens of bytes). Unknown size (0): no bound."""
    return float(file_bytes) if file_bytes > 0 else math.inf
