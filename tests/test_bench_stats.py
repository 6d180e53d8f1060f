"""Percentile math and per-run summaries, on samples whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtier.bench.records import RequestRecord
from kvtier.bench.stats import distribution, summarize
from kvtier.stats import percentile


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # between ranks 2 and 3
        ([1.0, 2.0, 3.0, 4.0], 90, 3.7),  # position 2.7
        ([1.0, 2.0, 3.0, 4.0], 99, 3.97),  # position 2.97
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),  # order of input does not matter
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
        ([7.0], 99, 7.0),
        ([10.0, 20.0], 50, 15.0),
        (list(map(float, range(1, 101))), 99, 99.01),  # position 98.01 over 1..100
        (list(map(float, range(1, 101))), 50, 50.5),
    ],
)
def test_percentile_exact(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected, abs=1e-12)


def test_percentile_of_nothing_is_none_and_bad_q_fails() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=50),
    st.sampled_from([50, 90, 99]),
)
def test_percentile_matches_numpy_linear(values: list[float], q: int) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-9)


def test_distribution_fields() -> None:
    d = distribution([100.0, 200.0, 300.0])
    assert d == {
        "p50": 200.0,
        "p90": pytest.approx(280.0),
        "p99": pytest.approx(298.0),
        "mean": 200.0,
        "min": 100.0,
        "max": 300.0,
    }
    assert set(distribution([]).values()) == {None}


def _record(start: float, e2e: float, ttft: float | None, ok: bool = True, **kw: object) -> RequestRecord:
    rec = RequestRecord("r", "http://x", 0, {}, start, ok=ok, ttft_ms=ttft, e2e_ms=e2e)
    for key, value in kw.items():
        setattr(rec, key, value)
    return rec


def test_summary_counts_throughput_and_errors() -> None:
    records = [
        _record(0, 1000, 100, itl_ms=[10.0, 20.0], completion_tokens=3, prompt_tokens=50),
        _record(500, 1500, 300, itl_ms=[30.0], completion_tokens=2, prompt_tokens=50, cached_tokens=32),
        _record(600, 100, None, ok=False, error_kind="http"),
        _record(700, 50, None, ok=False, error_kind="connect"),
    ]
    s = summarize(records)
    assert (s["requests"], s["ok"], s["errors"]) == (4, 2, 2)
    assert s["errors_by_kind"] == {"connect": 1, "http": 1}
    assert s["ttft_ms"]["p50"] == 200.0  # only successful requests count
    assert s["itl_ms"]["p50"] == 20.0  # gaps pooled over requests
    assert s["span_s"] == 2.0  # first send at 0 ms, last end at 500 + 1500 ms
    assert s["request_throughput"] == 1.0
    assert s["output_token_throughput"] == 2.5
    assert s["input_token_throughput"] == 50.0
    assert s["cached_tokens"] == 32


def test_summary_of_no_requests() -> None:
    s = summarize([])
    assert s["requests"] == 0
    assert s["request_throughput"] is None
