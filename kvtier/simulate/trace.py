"""Mooncake-format request traces (one JSON object a line) and their mapping onto cache units.

A line is `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}`; `hash_ids` are
prefix-chained ids of 512-token blocks (equal leading ids = reusable prefix; the last block may be partial).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtier.errors import UsageError

TRACE_BLOCK_TOKENS = 512  # Mooncake traces hash 512-token blocks


class TraceError(UsageError):
    """The trace file is missing or not in Mooncake format (exit 2, no traceback)."""


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...]  # prefix-chained block ids


@dataclass(frozen=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    block_tokens: int = TRACE_BLOCK_TOKENS
    source: str = ""

    def __len__(self) -> int:
        return len(self.requests)


def load_trace(path: Path, block_tokens: int = TRACE_BLOCK_TOKENS) -> Trace:
    try:
        with path.open(encoding="utf-8") as handle:
            return parse_trace(handle, str(path), block_tokens)
    except OSError as err:
        raise TraceError(f"{path}: cannot read the trace ({err.strerror}); give a Mooncake-format JSONL file") from err


def parse_trace(lines: Iterable[str], source: str = "<trace>", block_tokens: int = TRACE_BLOCK_TOKENS) -> Trace:
    requests: list[TraceRequest] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise TraceError(f"{source}:{number}: not JSON ({err.msg}); write one JSON object a line") from err
        requests.append(_request(row, f"{source}:{number}", block_tokens))
    if not requests:
        raise TraceError(f"{source}: the trace has no requests; give at least one JSON line")
    return Trace(tuple(requests), block_tokens, source)


def _request(row: Any, where: str, block_tokens: int) -> TraceRequest:
    if not isinstance(row, dict):
        raise TraceError(f"{where}: a line must be a JSON object; write {{timestamp, input_length, hash_ids}}")
    timestamp = row.get("timestamp")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or timestamp < 0:
        raise TraceError(f"{where}: timestamp {timestamp!r} is not a time; give milliseconds >= 0")
    length = row.get("input_length")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise TraceError(f"{where}: input_length {length!r} is not a token count; give an integer >= 1")
    output = row.get("output_length", 0)
    if isinstance(output, bool) or not isinstance(output, int) or output < 0:
        raise TraceError(f"{where}: output_length {output!r} is not a token count; give an integer >= 0")
    ids = row.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TraceError(f"{where}: hash_ids must be a list of integers (one id per {block_tokens}-token block)")
    expected = -(-length // block_tokens)
    if len(ids) != expected:
        raise TraceError(
            f"{where}: {len(ids)} hash_ids for input_length {length}; "
            f"a Mooncake trace has one id per {block_tokens}-token block ({expected} here)"
        )
    return TraceRequest(float(timestamp), length, output, tuple(ids))


@dataclass(frozen=True)
class UnitTrace:
    """Requests in arrival order, as the cache units the simulator tracks (see `to_units`)."""

    arrival_s: tuple[float, ...]
    tokens: tuple[int, ...]
    units: tuple[tuple[int, ...], ...]
    sessions: tuple[int, ...]  # the first block id: the trace has no session id
    unit_tokens: int
    blocks_per_unit: int


def blocks_per_unit(chunk_tokens: int, block_tokens: int = TRACE_BLOCK_TOKENS) -> int:
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
    if qps_scale <= 0:
        raise UsageError(f"qps scale {qps_scale} is not positive; give a factor > 0 (2 doubles the request rate)")
    per_unit = blocks_per_unit(chunk_tokens, trace.block_tokens)
    ordered = sorted(trace.requests, key=lambda r: r.timestamp_ms)  # stable: equal times keep file order
    units: list[tuple[int, ...]] = []
    for request in ordered:
        blocks = request.blocks
        if per_unit == 1:
            units.append(blocks)
        else:
            last = len(blocks) - 1
            units.append(tuple(blocks[min(i + per_unit - 1, last)] for i in range(0, len(blocks), per_unit)))
    return UnitTrace(
        arrival_s=tuple(r.timestamp_ms / 1000.0 / qps_scale for r in ordered),
        tokens=tuple(r.input_tokens for r in ordered),
        units=tuple(units),
        sessions=tuple(r.blocks[0] for r in ordered),
        unit_tokens=per_unit * trace.block_tokens,
        blocks_per_unit=per_unit,
    )
