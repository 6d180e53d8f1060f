"""Inputs that used to hang the simulator or the trace replay, or read a whole file for `--limit` (issue 29): each
answers in bounded time with one line naming the file and line, and a trace is read one line at a time."""

from __future__ import annotations

import json
import signal
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from kvtier.bench.workloads import TraceReplay
from kvtier.cli import main
from kvtier.simulate.cache import SharedPool
from kvtier.trace import TraceError, load_trace
from tests.support import CONFIG_DIR

T = TypeVar("T")
LIMIT_S = 5.0


class _TooSlowError(Exception):
    pass


@contextmanager
def _within(seconds: float) -> Iterator[None]:
    """Fail the test, instead of hanging it, when the body runs longer than `seconds` (pure-Python loops only)."""

    def stop(_signum: int, _frame: object) -> None:
        raise _TooSlowError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _bounded(call: Callable[[], T]) -> T:
    with _within(LIMIT_S):
        return call()


def _line(timestamp: float, ids: list[int]) -> str:
    return json.dumps({"timestamp": timestamp, "input_length": 512 * len(ids), "output_length": 1, "hash_ids": ids})


@pytest.mark.parametrize("now", [1e297, 1e12, 4e9])
@pytest.mark.parametrize("period", [30.0, 1e-300, 1e-9])
def test_the_janitor_catches_up_on_any_gap_in_bounded_time(now: float, period: float) -> None:
    """Adding the period to a time past 2**53 periods moved nothing and the catch-up loop never ended."""
    pool = SharedPool(4, max_age_s=60.0, sweep_every_s=period, target_fraction=0.5)
    pool.store([1, 2, 3], replica=0, now=0.0)
    _bounded(lambda: pool.advance(now))
    assert len(pool) == 0  # all aged out by the last sweep due
    assert pool.next_sweep > now
    pool.store([4], replica=0, now=now)
    _bounded(lambda: pool.advance(now + 1.0))
    assert 4 in pool.files


@pytest.mark.parametrize("args", [[], ["--janitor-every", "1e-300"]])
def test_simulate_refuses_a_time_beyond_its_range_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    trace = tmp_path / "late.jsonl"
    trace.write_text(_line(0, [1, 2]) + "\n" + _line(1e300, [1, 2]) + "\n")
    command = ["simulate", "--config-dir", str(CONFIG_DIR), "--trace", str(trace), "--no-plots", *args]
    assert _bounded(lambda: main(command)) == 2
    err = capsys.readouterr().err.strip()
    assert f"{trace}:2: timestamp 1e+300 ms" in err and "\n" not in err


@pytest.mark.parametrize("args", [["--janitor-every", "1e-300"], ["--qps-scale", "1e-300"]])
def test_tiny_periods_and_scales_answer_in_bounded_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(_line(1000.0 * i, [1, 2, 10 + i]) + "\n" for i in range(40)))
    command = ["simulate", "--config-dir", str(CONFIG_DIR), "--trace", str(trace), "--no-plots", "--json", *args]
    code = _bounded(lambda: main(command))
    captured = capsys.readouterr()
    if args[0] == "--qps-scale":  # 39 s stretched by 1e300: refused, naming the last line
        assert code == 2 and f"{trace}:40: timestamp 39000 ms at --qps-scale 1e-300" in captured.err
    else:  # a janitor at every event
        assert code == 0 and json.loads(captured.out)["results"]


def test_a_replay_refuses_a_gap_it_would_sleep_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "late.jsonl"
    trace.write_text(_line(0, [1]) + "\n" + _line(1e300, [1, 2]) + "\n")
    replay = TraceReplay(url="http://127.0.0.1:9", path=trace, requests=load_trace(trace).requests)
    with pytest.raises(TraceError, match=rf"{trace}:2: this request would be sent 1e\+297 s after"):
        _bounded(replay.schedule)
    # Within the limit, or cut by a duration, it is planned as before.
    assert len(TraceReplay(url="u", path=trace, requests=replay.requests, duration_s=60).schedule()) == 1
    # The command refuses it before contacting the URL (nothing listens there).
    command = ["bench", "trace", "--url", "http://127.0.0.1:9", "--trace", str(trace), "--no-progress"]
    assert _bounded(lambda: main(command)) == 2
    assert f"{trace}:2: this request would be sent" in capsys.readouterr().err


def _peak_bytes(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_limit_reads_only_what_it_keeps(tmp_path: Path) -> None:
    """`--limit 10` on a long trace: memory and time independent of the file's length (it read everything)."""
    lines = "".join(_line(i, list(range(i, i + 30))) + "\n" for i in range(20_000))
    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    short.write_text(lines[: len(lines) // 20])
    long.write_text(lines * 4)
    assert long.stat().st_size > 50 * short.stat().st_size
    small = _peak_bytes(lambda: load_trace(short, limit=10))
    big = _peak_bytes(lambda: load_trace(long, limit=10))
    assert big < 2 * small + 256 * 1024, (small, big)
    assert len(load_trace(long, limit=10)) == 10


def test_progress_starts_with_the_first_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(_line(i, [i]) + "\n" for i in range(5000)))
    seen: list[int] = []
    trace = load_trace(path, progress=seen.append)
    assert len(trace) == 5000
    assert seen[0] < path.stat().st_size / 4  # reported while reading, not only at the end
    assert seen[-1] == path.stat().st_size


def test_a_file_without_newlines_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_bytes(b"x" * (3 << 20))
    with pytest.raises(TraceError, match=r"one.jsonl:1: line longer than 1,048,576 bytes"):
        load_trace(path)

    def refused() -> None:
        with pytest.raises(TraceError):
            load_trace(path)

    assert _peak_bytes(refused) < 4 << 20
