"""The shipped sample trace (examples/traces/) loads with the one trace parser, and `make bench-sim` uses it, so the
simulator benchmark runs on a fresh clone; a bad trace there is one clean line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.trace import load_trace
from tests.support import ROOT, SAMPLE_TRACE
from tools import benchsim


def test_the_sample_loads_whole_and_says_where_it_comes_from() -> None:
    trace = load_trace(SAMPLE_TRACE)
    assert len(trace) == 3993
    assert sum(r.input_length > 16_384 for r in trace.requests) == 1587  # what the docs say simulate skips
    readme = (SAMPLE_TRACE.parent / "README.md").read_text(encoding="utf-8")
    for fact in ("kvcache-ai/Mooncake", "3b5a594133958449a1feaf1c9e0fc1b553e34a28", "Apache-2.0"):
        assert fact in readme


def test_bench_sim_defaults_to_the_sample() -> None:
    assert benchsim.DEFAULT_TRACE == SAMPLE_TRACE
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"SIM_TRACE ?= {SAMPLE_TRACE.relative_to(ROOT)}\n" in makefile
    assert "--output docs/benchmarks.md" in makefile


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read trace"),
        (b"{not json\n", ":1: not JSON"),
        (b'{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [1, 2]}\n', ":1: output_length 0"),
    ],
)
def test_a_bad_trace_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    trace = tmp_path / "trace.jsonl"
    if content is not None:
        trace.write_bytes(content)
    assert benchsim.main(["--trace", str(trace), "--repeat", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("python -m tools.benchsim: ")
