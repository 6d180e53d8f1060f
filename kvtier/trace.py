"""Mooncake-format request traces: the one parser behind `kvtier bench trace` and `kvtier simulate`.

A line is `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}`; `hash_ids` are
prefix-chained ids of 512-token blocks, one per block of the prompt (equal leading ids = reusable prefix; the last
block may be partial). Source: kvcache-ai/Mooncake@3b5a594:FAST25-release/ (README and traces/;
docs/references.md "Traces and load generators"). Every line of its conversation (12,031) and synthetic (3,993) traces has all four keys, one id per
block and an output_length of at least 1, so the parser requires them (vLLM also rejects `max_tokens` below 1).

Any problem is a TraceError naming the file and line (exit 2, no traceback).
"""

from __future__ import annotations

import json
import math
import os
import select
import shlex
import stat
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from kvtier.errors import UsageError

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake traces hash 512-token blocks
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# A line of the public traces is at most a few KB (one id per 512 tokens); a longer one is not a trace line, and the
# cap keeps a file without newlines (or a device) from being read into memory whole.
MAX_LINE_BYTES = 1 << 20
ADAPTER_MAX = 63  # an adapter name (kvtier/config/adapters.py: an RFC 1123 label)
PROGRESS_LINES = 1024  # lines between progress callbacks while reading


class TraceError(UsageError):
    """The trace file is unreadable or not in Mooncake format (exit 2, no traceback)."""


@dataclass(frozen=True)
class TraceRequest:
    timestamp_ms: float
    input_length: int  # prompt tokens
    output_length: int  # generated tokens (>= 1)
    hash_ids: tuple[int, ...]  # prefix-chained block ids, one per `block_tokens` of the prompt
    line: int = 0  # 1-based line in the file (0: built in code)
    # The LoRA adapter that served it (optional `adapter` key, issue 35; None or absent: the base model). Adapters
    # key their KV apart on every tier, so two requests share KV only when they name the same adapter.
    adapter: str | None = None


# A request as `read_rows` yields it: the fields of `TraceRequest`, in its order.
Row = tuple[float, int, int, tuple[int, ...], int, str | None]


@dataclass(frozen=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    source: str = ""

    def __len__(self) -> int:
        return len(self.requests)


def load_trace(
    path: Path,
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Trace:
    """Read and check a trace file, one line at a time: `limit` keeps the first N requests and reads no further, so
    its memory and time do not depend on the file's length; `progress` gets the bytes read so far, every
    PROGRESS_LINES lines and at the end."""
    rows = read_rows(path, block_tokens=block_tokens, limit=limit, progress=progress)
    return Trace(tuple(TraceRequest(*row) for row in rows), block_tokens, str(path))


def read_rows(
    path: Path,
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    limit: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Row]:
    """The checked requests of a trace file, one at a time in file order, as `Row`s (what `TraceRequest` holds, as
    a plain tuple: a streaming reader makes millions of them). Holds one line at a time; TraceError as
    `load_trace`."""
    try:
        with _open(path) as handle:
            yield from parse_rows(_lines(handle, path, progress), str(path), block_tokens=block_tokens, limit=limit)
    except OSError as err:
        raise TraceError(
            f"cannot read trace {path} ({err.strerror or err}); give a Mooncake-format JSONL file"
        ) from err


FIFO_WAIT_S = 10.0  # how long a named pipe may stay without a writer before the trace is refused
GZIP_MAGIC = b"\x1f\x8b"
BOM = "\ufeff"


def _open(path: Path) -> BinaryIO:
    """The trace file for reading. A named pipe (`--trace <(zcat t.gz)`, mkfifo) is opened without waiting for a
    writer, then given FIFO_WAIT_S for one to send data or close: a pipe nobody writes to is one line, not a hang."""
    try:
        is_fifo = stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        is_fifo = False  # open() below says why
    if not is_fifo:
        return path.open("rb")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    if not poller.poll(int(FIFO_WAIT_S * 1000)):
        os.close(fd)
        raise TraceError(
            f"{path}: a named pipe that no program wrote to within {FIFO_WAIT_S:g} s; start the program that writes "
            "it first, or give the trace file itself"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _decompress(path: Path) -> str:
    """The commands that turn a gzip trace into text. gunzip only takes a name ending in .gz (it refuses `t.jsonl`
    with "unknown suffix"), so another name is decompressed next to itself with zcat."""
    name = shlex.quote(str(path))
    if path.suffix == ".gz":
        first = f"gunzip -k {name}"
    else:
        first = f"zcat {name} > {shlex.quote(str(path.with_name(f'{path.stem}-plain{path.suffix}')))}"
    return f"decompress it first (`{first}`) or pass `--trace <(zcat {name})`"


def _lines(handle: BinaryIO, path: Path, progress: Callable[[int], None] | None) -> Iterator[str]:
    """The file's lines as text, each at most MAX_LINE_BYTES (a device or a file without newlines stops there)."""
    done = 0
    number = 0
    while True:
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            break
        number += 1
        done += len(raw)
        if len(raw) > MAX_LINE_BYTES:
            raise TraceError(
                f"{path}:{number}: line longer than {MAX_LINE_BYTES:,} bytes; a Mooncake trace has one short JSON "
                "object a line"
            )
        if number == 1 and raw.startswith(GZIP_MAGIC):
            raise TraceError(f"{path}: gzip-compressed, not JSONL text; {_decompress(path)}")
        try:
            text = raw.decode("utf-8")
            if number == 1:
                text = text.removeprefix(BOM)  # a byte-order mark some editors write first: not part of the JSON
        except UnicodeDecodeError as err:
            raise TraceError(
                f"{path}:{number}: not UTF-8 text (byte 0x{raw[err.start]:02x}); give a Mooncake-format JSONL file"
            ) from err
        if progress is not None and number % PROGRESS_LINES == 0:
            progress(done)
        yield text
    if progress is not None:
        progress(done)


def parse_trace(
    lines: Iterable[str],
    source: str = "<trace>",
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    limit: int | None = None,
) -> Trace:
    rows = parse_rows(lines, source, block_tokens=block_tokens, limit=limit)
    return Trace(tuple(TraceRequest(*row) for row in rows), block_tokens, source)


def parse_rows(
    lines: Iterable[str],
    source: str = "<trace>",
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    limit: int | None = None,
) -> Iterator[Row]:
    """Check each line and yield it as a `Row`; TraceError naming the line on the first bad one, or on a trace
    with no request at all (after the last line)."""
    count = 0
    for number, line in enumerate(lines, start=1):
        if limit is not None and count >= limit:
            break
        try:
            row = _decode(line)
        except json.JSONDecodeError as err:
            if not line.strip():  # a blank line (found only here: most lines decode)
                continue
            raise TraceError(f"{source}:{number}: not JSON ({err.msg}); write one JSON object a line") from err
        except _NonFiniteError as err:
            raise TraceError(f"{source}:{number}: {err} is not a finite number; every number must be finite") from err
        # JSON spells a boolean `true` or `false`: a line without either holds none (the id check needs to know).
        yield _row(row, source, number, block_tokens, "true" in line or "false" in line)
        count += 1
    if not count:
        raise TraceError(f"{source}: the trace has no requests; give one JSON object a line ({', '.join(FIELDS)})")


class _NonFiniteError(ValueError):
    pass


def _non_finite(name: str) -> NoReturn:
    """Python's JSON reader accepts NaN and Infinity (not JSON); a trace with them would hang a replay."""
    raise _NonFiniteError(name)


_DECODER = json.JSONDecoder(parse_constant=_non_finite)  # one decoder: json.loads builds one per call with options
# The C scanner behind `decode`: JSONDecoder.__init__ sets it (CPython Lib/json/decoder.py); typeshed omits it.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"  # the whitespace JSON allows around a value (json.decoder.WHITESPACE)


def _decode(line: str) -> Any:
    """`_DECODER.decode(line)`: a line that starts with its value and ends with at most JSON whitespace goes straight
    to the C scanner (decode's two regex passes around it cost a tenth of parsing); anything else, errors included,
    through `decode` itself."""
    try:
        value, end = _SCAN(line, 0)
    except StopIteration:  # no value at the line's first character (whitespace, or not JSON): decode says which
        return _DECODER.decode(line)
    if end != len(line) and line[end:].strip(_JSON_SPACE):
        return _DECODER.decode(line)  # raises "Extra data"
    return value


_INT = frozenset({int})  # `type(True)` is bool, so bools are refused too
# Ids are 64-bit at most (Mooncake's are small counters): the simulator gives each LoRA adapter its own key space
# above them (kvtier/simulate/trace.py).
HASH_ID_LIMIT = 1 << 64
_FLOAT_MAX_INT = int(sys.float_info.max)  # a larger integer is no time (float() overflows)


def _row(row: Any, source: str, number: int, block_tokens: int, booleans: bool = True) -> Row:
    """A line's request, checked. The common case is one expression of C-level checks; any failure goes to
    `_refuse`, which finds the first problem and says it. `booleans`: False when the line holds no JSON boolean."""
    try:
        timestamp, length, output, ids = row["timestamp"], row["input_length"], row["output_length"], row["hash_ids"]
        adapter = row.get("adapter")
    except (TypeError, KeyError, AttributeError):
        _refuse(row, source, number, block_tokens)
    kind = type(timestamp)
    if not (
        ((kind is float and 0.0 <= timestamp < math.inf) or (kind is int and 0 <= timestamp <= _FLOAT_MAX_INT))
        and type(length) is int
        and length >= 1
        and type(output) is int
        and output >= 1
        and type(ids) is list
        and len(ids) == -(-length // block_tokens)
        and _ids_ok(ids, booleans)
        and (adapter is None or (type(adapter) is str and 1 <= len(adapter) <= ADAPTER_MAX))
    ):
        _refuse(row, source, number, block_tokens)
    return float(timestamp), length, output, tuple(ids), number, adapter


def _ids_ok(ids: list[Any], booleans: bool = True) -> bool:
    """Every id an integer in [0, HASH_ID_LIMIT). One C-level pass: an array of unsigned 64-bit integers takes exactly
    those, and booleans (True is 1), which only a line that spells one (`booleans`) and an id equal to 0 or 1 can
    hide; those lists get the exact check. (The per-id Python loop was half of parsing, a set of types and min/max a
    quarter; looking for booleans in every list, as many passes as the array.)"""
    try:
        array("Q", ids)
    except (TypeError, OverflowError):
        return False
    return not (booleans and (True in ids or False in ids)) or set(map(type, ids)) <= _INT


def _refuse(row: Any, source: str, number: int, block_tokens: int) -> NoReturn:
    """The TraceError of the first problem of a line `_row` did not accept."""
    where = f"{source}:{number}"
    if not isinstance(row, dict) or any(key not in row for key in FIELDS):
        raise TraceError(f"{where}: a line must be a JSON object with the keys {', '.join(FIELDS)} (Mooncake format)")
    timestamp = row["timestamp"]
    if not _is_number(timestamp) or not math.isfinite(float(timestamp)) or timestamp < 0:
        raise TraceError(f"{where}: timestamp {_show(timestamp)} is not a time; give finite milliseconds >= 0")
    for name in ("input_length", "output_length"):
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TraceError(f"{where}: {name} {_show(value)} is not a token count; give an integer >= 1")
    length: int = row["input_length"]
    ids = row["hash_ids"]
    if not isinstance(ids, list) or not set(map(type, ids)) <= _INT or (ids and min(ids) < 0):
        raise TraceError(f"{where}: hash_ids must be a list of integers >= 0 (one id per {block_tokens}-token block)")
    if ids and max(ids) >= HASH_ID_LIMIT:
        raise TraceError(f"{where}: hash id {max(ids)} is not a 64-bit id; give ids below 2**64")
    expected = -(-length // block_tokens)
    if len(ids) != expected:
        raise TraceError(
            f"{where}: {len(ids)} hash_ids for input_length {length}; "
            f"a Mooncake trace has one id per {block_tokens}-token block ({expected} here)"
        )
    adapter = row.get("adapter")
    raise TraceError(
        f"{where}: adapter {_show(adapter)} is not an adapter name; give a string of 1-{ADAPTER_MAX} characters, "
        "or null for the base model"
    )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        float(value)  # an integer too large for a float (10**400) is no time either
    except OverflowError:
        return False
    return True
