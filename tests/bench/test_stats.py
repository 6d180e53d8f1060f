"""Distributions and per-run summaries, on samples whose answers are known (the percentile: tests/stats/)."""

from __future__ import annotations

import numpy as np
import pytest

from kvtier.bench.arrivals import send_offsets_ms
from kvtier.bench.records import RequestRecord
from kvtier.bench.stats import (
    busy_seconds,
    distribution,
    meets_slo,
    parse_percentiles,
    parse_slo,
    summarize,
)


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


def test_chosen_percentiles_name_their_keys() -> None:
    d = distribution([float(v) for v in range(1, 1001)], (50.0, 99.0, 99.9))
    assert set(d) == {"p50", "p99", "p99.9", "mean", "min", "max"}
    assert d["p99.9"] == pytest.approx(999.001)  # position 998.001 over 1..1000
    assert parse_percentiles("99.9, 50,90") == (50.0, 90.0, 99.9)
    for bad, message in (("50,x", "'x' is not a number"), ("0", "between 0 and 100"), ("50,50", "repeats")):
        with pytest.raises(ValueError, match=message):
            parse_percentiles(bad)


def _timed(ttft: float, e2e: float, tpot: float | None, ok: bool = True) -> RequestRecord:
    return RequestRecord("r", "u", 0, {}, 0.0, ok=ok, ttft_ms=ttft, e2e_ms=e2e, tpot_ms=tpot)


def test_goodput_on_known_samples() -> None:
    slo = parse_slo("ttft=500ms,tpot=0.05s")
    assert slo == {"ttft": 500.0, "tpot": 50.0}
    records = [
        _timed(400, 900, 40),  # good
        _timed(500, 900, 50),  # good: at the bound counts (vLLM: slo >= value)
        _timed(501, 900, 10),  # TTFT over
        _timed(100, 900, 60),  # TPOT over
        _timed(100, 120, None),  # one token: no TPOT, counted as 0 (vLLM) -> good
        _timed(100, 900, 10, ok=False),  # failed requests are never good
    ]
    assert [meets_slo(r, slo) for r in records] == [True, True, False, False, True, False]
    for i, r in enumerate(records):
        r.start_ms = i * 1000.0  # sends 1 s apart: the span is 5 s + the last one's 900 ms
    s = summarize(records, slo=slo)
    assert s["goodput"]["good"] == 3
    assert s["goodput"]["good_fraction"] == pytest.approx(0.5)
    assert s["goodput"]["request_goodput"] == pytest.approx(3 / 5.9)
    assert meets_slo(_timed(100, 2500, 10), parse_slo("e2e=2s")) is False
    for bad in ("ttft", "ttft=fast", "latency=5ms", "ttft=0ms", "ttft=1ms,ttft=2ms", ""):
        with pytest.raises(ValueError, match=r"SLO|ms|twice"):
            parse_slo(bad)


def test_tpot_percentiles_and_busy_time() -> None:
    records = [_timed(100, 300, 20), _timed(100, 500, 40), _timed(100, 120, None)]
    for r, start in zip(records, (0.0, 100.0, 5000.0), strict=True):
        r.start_ms = start
    s = summarize(records, percentiles=(50.0,))
    assert s["tpot_ms"]["p50"] == 30.0 and s["tpot_ms"]["mean"] == 30.0  # one-token requests have no TPOT
    # in flight: [0, 300) and [100, 600) overlap into 600 ms, then [5000, 5120): 720 ms busy of a 5.12 s span
    assert busy_seconds(records) == pytest.approx(0.72)
    assert summarize(records, busy=True)["request_throughput"] == pytest.approx(3 / 0.72)
    assert summarize(records)["request_throughput"] == pytest.approx(3 / 5.12)


def test_arrivals_fixed_poisson_and_gamma() -> None:
    def gaps(arrival: str, burstiness: float = 1.0, n: int = 20000) -> np.ndarray:
        times = send_offsets_ms(4.0, arrival, burstiness, seed=7)  # type: ignore[arg-type]
        return np.diff([next(times) for _ in range(n)])

    assert list(gaps("fixed", n=4)) == [250.0, 250.0, 250.0]
    for arrival, burstiness in (("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0)):
        g = gaps(arrival, burstiness)
        assert g.mean() == pytest.approx(250.0, rel=0.05)  # the rate holds whatever the shape
        # gamma(shape k): coefficient of variation 1/sqrt(k); Poisson is k = 1
        assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)
    same = send_offsets_ms(4.0, "gamma", 0.5, seed=3)
    again = send_offsets_ms(4.0, "gamma", 0.5, seed=3)
    assert [next(same) for _ in range(5)] == [next(again) for _ in range(5)]  # seeded: a run repeats
