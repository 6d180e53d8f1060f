"""The one percentile the benchmark and the simulator report (kvtier/stats), on samples whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
