"""A Mooncake trace (kvtier.trace, the parser `kvtier bench trace` shares) mapped onto the cache units the simulator
tracks: a unit is one or more 512-token trace blocks, named by its last block id.

`UnitMapper` maps one request at a time (the streaming replay of kvtier/simulate/stream.py); `to_units` maps a whole
trace in memory, in arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import NoReturn

from kvtier.errors import UsageError
from kvtier.trace import HASH_ID_LIMIT, MOONCAKE_BLOCK_TOKENS, Row, Trace

# The latest arrival the simulator accepts, in seconds (about 300 years): there a float still resolves 2 us, so a
# TTFT is the difference of two times; at 1e300 s it would round to 0.
MAX_ARRIVAL_S = 1e10

# One request as a replay sees it: (arrival s, prompt tokens, units, session, LoRA adapter or None). A plain tuple:
# a replay of millions of requests makes millions of them.
Request = tuple[float, int, tuple[int, ...], int, str | None]


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

    def requests(self) -> Iterator[Request]:
        adapters = self.adapters or repeat(None, len(self.tokens))
        return zip(self.arrival_s, self.tokens, self.units, self.sessions, adapters, strict=True)


def blocks_per_unit(chunk_tokens: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> int:
    """How many trace blocks make one simulated cache unit.

    Chunks that divide a trace block (LMCache's 256 in 512) are always read and written together with their block,
    so the block is the unit. Larger chunks group blocks (an LMCache hit needs the whole chunk); sizes that are not
    a multiple of the block are rounded to the nearest number of blocks.
    """
    if chunk_tokens <= block_tokens:
        return 1
    return max(1, round(chunk_tokens / block_tokens))


def check_qps_scale(qps_scale: float) -> None:
    if not (math.isfinite(qps_scale) and qps_scale > 0):
        raise UsageError(
            f"qps scale {qps_scale} is not a positive number; give a finite factor > 0 (2 doubles the request rate)"
        )


class LateArrivalError(Exception):
    """A row arrives beyond MAX_ARRIVAL_S; the caller names the trace's latest row (`UnitMapper.refuse_late`)."""

    def __init__(self, row: Row) -> None:
        super().__init__(f"line {row[4]} arrives too late")
        self.row = row


class UnitMapper:
    """Maps trace rows, one at a time, onto cache units: a unit is named by its last block id (ids are
    prefix-chained, so that id identifies the whole prefix), and arrivals are compressed by `qps_scale` (2.0 = twice
    the request rate).

    LoRA adapters key their KV apart on every tier (issue 35): the units of the n-th adapter the trace names (in
    the order it names them) are `id + n * HASH_ID_LIMIT`, above every id (kvtier.trace refuses ids of 2**64 and
    more), so no adapter's units meet another's or the base model's, whenever in the trace the adapter first appears.
    """

    def __init__(
        self, chunk_tokens: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS, qps_scale: float = 1.0, source: str = ""
    ) -> None:
        check_qps_scale(qps_scale)
        self.per_unit = blocks_per_unit(chunk_tokens, block_tokens)
        self.unit_tokens = self.per_unit * block_tokens
        self.qps_scale = qps_scale
        self.source = source
        self.spaces: dict[str, int] = {}  # adapter -> its key space, from 1

    def __call__(self, row: Row) -> Request:
        timestamp, tokens, _, blocks, _, adapter = row
        arrival = timestamp / 1000.0 / self.qps_scale
        if arrival > MAX_ARRIVAL_S:
            raise LateArrivalError(row)
        per_unit = self.per_unit
        if per_unit == 1:
            units = blocks
        else:
            last = len(blocks) - 1
            units = tuple(blocks[min(i + per_unit - 1, last)] for i in range(0, len(blocks), per_unit))
        if adapter is not None:
            space = self.spaces.get(adapter)
            if space is None:
                space = self.spaces[adapter] = len(self.spaces) + 1
            offset = space * HASH_ID_LIMIT
            units = tuple(u + offset for u in units)
        return arrival, tokens, units, blocks[0], adapter

    def refuse_late(self, row: Row) -> NoReturn:
        """The UsageError of a trace that arrives beyond MAX_ARRIVAL_S, naming `row` (the latest)."""
        timestamp, line = row[0], row[4]
        arrival = timestamp / 1000.0 / self.qps_scale
        raise UsageError(
            f"{self.source or '<trace>'}:{line}: timestamp {timestamp:g} ms at --qps-scale {self.qps_scale:g} arrives "
            f"{arrival:.3g} s in, beyond {MAX_ARRIVAL_S:g} s; fix the timestamp (milliseconds) or give a larger "
            "--qps-scale"
        )


def to_units(trace: Trace, chunk_tokens: int, qps_scale: float = 1.0) -> UnitTrace:
    """Map a whole trace onto cache units (`UnitMapper`), in arrival order (stable: equal times keep file order)."""
    mapper = UnitMapper(chunk_tokens, trace.block_tokens, qps_scale, trace.source)
    ordered = sorted(trace.requests, key=lambda r: r.timestamp_ms)
    if ordered and ordered[-1].timestamp_ms / 1000.0 / qps_scale > MAX_ARRIVAL_S:
        late = ordered[-1]  # the latest, as the message has always named
        mapper.refuse_late((late.timestamp_ms, late.input_length, 0, late.hash_ids, late.line, late.adapter))
    mapped = [mapper((r.timestamp_ms, r.input_length, r.output_length, r.hash_ids, r.line, r.adapter)) for r in ordered]
    return UnitTrace(
        arrival_s=tuple(r[0] for r in mapped),
        tokens=tuple(r[1] for r in mapped),
        units=tuple(r[2] for r in mapped),
        sessions=tuple(r[3] for r in mapped),
        unit_tokens=mapper.unit_tokens,
        blocks_per_unit=mapper.per_unit,
        adapters=tuple(r[4] for r in mapped) if mapper.spaces else (),
    )
