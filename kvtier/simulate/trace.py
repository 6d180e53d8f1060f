"""A Mooncake trace (kvtier.trace, the parser `kvtier bench trace` shares) mapped onto the cache units the simulator
tracks: a unit is one or more 512-token trace blocks, named by its last block id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.errors import UsageError
from kvtier.trace import MOONCAKE_BLOCK_TOKENS, Trace

# The latest arrival the simulator accepts, in seconds (about 300 years): there a float still resolves 2 us, so a
# TTFT is the difference of two times; at 1e300 s it would round to 0.
MAX_ARRIVAL_S = 1e10


@dataclass(frozen=True)
class UnitTrace:
    """Requests in arrival order, as the cache units the simulator tracks (see `to_units`)."""

    arrival_s: tuple[float, ...]
    tokens: tuple[int, ...]
    units: tuple[tuple[int, ...], ...]
    sessions: tuple[int, ...]  # the first block id: the trace has no session id
    unit_tokens: int
    blocks_per_unit: int
    # Each request's LoRA adapter (None: the base model); empty when the trace names none (issue 35).
    adapters: tuple[str | None, ...] = ()


def blocks_per_unit(chunk_tokens: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> int:
    """How many trace blocks make one simulated cache unit.

    Chunks that divide a trace block (LMCache's 256 in 512) are always read and written together with their block,
    so the block is the unit. Larger chunks group blocks (an LMCache hit needs the whole chunk); sizes that are not
    a multiple of the block are rounded to the nearest number of blocks.
    """
    if chunk_tokens <= block_tokens:
        return 1
    return max(1, round(chunk_tokens / block_tokens))


def to_units(trace: Trace, chunk_tokens: int, qps_scale: float = 1.0) -> UnitTrace:
    """Map a trace onto cache units: a unit is named by its last block id (ids are prefix-chained, so that id
    identifies the whole prefix), and arrivals are compressed by `qps_scale` (2.0 = twice the request rate)."""
    if not (math.isfinite(qps_scale) and qps_scale > 0):
        raise UsageError(
            f"qps scale {qps_scale} is not a positive number; give a finite factor > 0 (2 doubles the request rate)"
        )
    per_unit = blocks_per_unit(chunk_tokens, trace.block_tokens)
    ordered = sorted(trace.requests, key=lambda r: r.timestamp_ms)  # stable: equal times keep file order
    if ordered and ordered[-1].timestamp_ms / 1000.0 / qps_scale > MAX_ARRIVAL_S:
        late = ordered[-1]
        where = f"{trace.source or '<trace>'}:{late.line}"
        raise UsageError(
            f"{where}: timestamp {late.timestamp_ms:g} ms at --qps-scale {qps_scale:g} arrives "
            f"{late.timestamp_ms / 1000.0 / qps_scale:.3g} s in, beyond {MAX_ARRIVAL_S:g} s; fix the timestamp "
            "(milliseconds) or give a larger --qps-scale"
        )
    units: list[tuple[int, ...]] = []
    for request in ordered:
        blocks = request.hash_ids
        if per_unit == 1:
            units.append(blocks)
        else:
            last = len(blocks) - 1
            units.append(tuple(blocks[min(i + per_unit - 1, last)] for i in range(0, len(blocks), per_unit)))
    names = sorted({r.adapter for r in ordered if r.adapter is not None})
    if names:  # one key space per adapter: the same blocks under another adapter are other KV (issue 35)
        spaces = len(names) + 1
        index = {name: i + 1 for i, name in enumerate(names)}
        units = [
            tuple(u * spaces + (index[r.adapter] if r.adapter is not None else 0) for u in request_units)
            for r, request_units in zip(ordered, units, strict=True)
        ]
    return UnitTrace(
        adapters=tuple(r.adapter for r in ordered) if names else (),
        arrival_s=tuple(r.timestamp_ms / 1000.0 / qps_scale for r in ordered),
        tokens=tuple(r.input_length for r in ordered),
        units=tuple(units),
        sessions=tuple(r.hash_ids[0] for r in ordered),
        unit_tokens=per_unit * trace.block_tokens,
        blocks_per_unit=per_unit,
    )
