"""Mooncake-format traces: one JSON object a line with `timestamp` (ms), `input_length`, `output_length` and
`hash_ids` (prefix-chained ids of 512-token blocks; equal leading ids mean a reusable prefix).

Source of the format: kvcache-ai/Mooncake@3b5a594:FAST25-release/ (see /work/notes/refs-bench.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kvtier.bench.prompts import PromptMaker
from kvtier.errors import UsageError

MOONCAKE_BLOCK_TOKENS = 512
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True)
class TraceRequest:
    line: int  # 1-based line in the file
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def load_trace(path: Path, *, limit: int | None = None) -> list[TraceRequest]:
    """Read and check a trace; any problem is a UsageError naming the file and line (exit 2)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read trace {path}: {err}") from err
    out: list[TraceRequest] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        out.append(_parse(path, number, line))
        if limit is not None and len(out) >= limit:
            break
    if not out:
        raise UsageError(f"trace {path} has no requests; expected one JSON object a line ({', '.join(_FIELDS)})")
    return out


def _parse(path: Path, number: int, line: str) -> TraceRequest:
    where = f"trace {path} line {number}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise UsageError(f"{where}: not JSON ({err.msg})") from err
    if not isinstance(obj, dict) or any(k not in obj for k in _FIELDS):
        raise UsageError(f"{where}: needs the keys {', '.join(_FIELDS)} (Mooncake format)")
    ts, inp, outp, ids = (obj[k] for k in _FIELDS)
    if not _number(ts) or ts < 0:
        raise UsageError(f"{where}: timestamp {ts!r} is not a number of milliseconds >= 0")
    for name, value in (("input_length", inp), ("output_length", outp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"{where}: {name} {value!r} is not a positive integer")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise UsageError(f"{where}: hash_ids must be a list of integers")
    return TraceRequest(number, float(ts), inp, outp, tuple(ids))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def trace_prompt(req: TraceRequest, maker: PromptMaker, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> str:
    """Prompt text for a trace request: block i of the prompt is the text of hash id i, cut to input_length words.

    Equal hash ids give equal text, so requests sharing leading ids share a prefix. If a line has fewer ids than
    its length needs, the rest is filler unique to that line (it cannot be shared).
    """
    words: list[str] = []
    for block_id in req.hash_ids:
        if len(words) >= req.input_length:
            break
        words.extend(maker.block(block_id, block_tokens))
    if len(words) < req.input_length:
        words.extend(maker.words(f"{maker.salt}:filler:{req.line}", req.input_length - len(words)))
    return " ".join(words[: req.input_length])
