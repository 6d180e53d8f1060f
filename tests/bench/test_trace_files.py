"""Trace files a newcomer has at hand (issue 39): a byte-order mark is read, a gzip file and a named pipe nobody
writes to are one line each (a pipe after a bounded wait, not a hang). Before: the BOM was "not JSON" with a fix that
was not the fix, gzip was "not UTF-8" with no hint to decompress, and a FIFO waited forever."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvtier.trace
from kvtier.trace import TraceError, load_trace

LINE = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]})


def test_a_byte_order_mark_is_read_as_the_start_of_text(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (LINE + "\n").encode() * 2)
    assert len(load_trace(path)) == 2


def test_a_gzip_trace_says_to_decompress_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress((LINE + "\n").encode()))
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert str(err.value) == (
        f"{path}: gzip-compressed, not JSONL text; decompress it first (`gunzip -k {path}`) or pass "
        f"`--trace <(zcat {path})`"
    )


@pytest.mark.parametrize("name", ["t.jsonl.gz", "t.jsonl", "my trace.jsonl"])
def test_the_decompress_commands_a_gzip_trace_is_given_work(tmp_path: Path, name: str) -> None:
    """Both commands of the message, run by bash as written, give a trace that loads. gunzip refuses a name without
    .gz ("unknown suffix"): the old message offered `gunzip -k t.jsonl` for a gzip file saved as t.jsonl."""
    path = tmp_path / name
    path.write_bytes(gzip.compress((LINE + "\n").encode() * 2))
    with pytest.raises(TraceError) as err:
        load_trace(path)
    first, substitution = re.findall(r"`([^`]+)`", str(err.value))
    subprocess.run(["bash", "-c", first], cwd=tmp_path, check=True, timeout=30)
    plain = next(p for p in tmp_path.iterdir() if p.read_bytes().startswith(b"{"))
    assert len(load_trace(plain)) == 2
    assert substitution.startswith("--trace ")
    loaded = subprocess.run(
        ["bash", "-c", f"{sys.executable} -c 'import sys, pathlib; from kvtier.trace import load_trace; "
                       f"print(len(load_trace(pathlib.Path(sys.argv[1]))))' {substitution.removeprefix('--trace ')}"],
        cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert loaded.stdout.strip() == "2"


def test_a_named_pipe_nobody_writes_to_is_refused_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    monkeypatch.setattr(kvtier.trace, "FIFO_WAIT_S", 0.5)
    start = time.monotonic()
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert time.monotonic() - start < 60  # bounded (the old code blocked in open() until a writer came)
    assert str(err.value) == (
        f"{path}: a named pipe that no program wrote to within 0.5 s; start the program that writes it first, or "
        "give the trace file itself"
    )


def test_a_named_pipe_with_a_writer_is_read(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    writer = subprocess.Popen(["sh", "-c", f"printf '%s\\n%s\\n' '{LINE}' '{LINE}' > {path}"])
    try:
        assert len(load_trace(path)) == 2
    finally:
        writer.wait(timeout=30)
