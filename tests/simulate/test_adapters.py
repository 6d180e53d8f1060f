"""LoRA adapters in the simulator (issue 35): a trace's `adapter` field keys each request's KV apart, and the result
reports hit rates per adapter."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kvtier.simulate import SimConfig, Trace, TraceRequest, parse_trace, simulate
from kvtier.simulate.result import TierTokens
from kvtier.simulate.trace import to_units
from kvtier.trace import TraceError
from tests.support import ROUND_COSTS

BLOCK = 512


def _trace(*rows: tuple[float, list[int], str | None]) -> Trace:
    return Trace(tuple(TraceRequest(t * 1000.0, len(ids) * BLOCK, 1, tuple(ids), adapter=a) for t, ids, a in rows))


def test_an_adapter_never_hits_kv_of_another_adapter_or_the_base_model() -> None:
    rows = _trace((0, [1, 2], None), (10, [1, 2], "faq"), (20, [1, 2], "billing"), (30, [1, 2], "faq"))
    model = dataclasses.replace(ROUND_COSTS, l2_tokens=10**9)
    result = simulate(rows, model, SimConfig())
    assert result.per_adapter == {
        "base": TierTokens(miss=1024),
        "billing": TierTokens(miss=1024),
        "faq": TierTokens(l0=1024, miss=1024),  # its second request hits its first
    }
    assert result.adapter_hit_rates()["faq"]["total"] == pytest.approx(0.5)
    assert result.tokens == TierTokens(l0=1024, miss=3072)
    # The same trace without adapter names: every request after the first hits (what a shared key would serve).
    blind = simulate(_trace((0, [1, 2], None), (10, [1, 2], None)), model, SimConfig())
    assert blind.tokens.hit == 1024 and not blind.per_adapter


def test_units_of_different_adapters_never_collide_and_stay_non_negative() -> None:
    units = to_units(_trace((0, [0, 7], None), (1, [0, 7], "a"), (2, [0, 7], "b")), 512)
    assert len({u for request in units.units for u in request}) == 6
    assert min(u for request in units.units for u in request) >= 0
    assert units.adapters == (None, "a", "b")


def test_the_adapter_field_is_optional_and_checked() -> None:
    line = {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}
    assert parse_trace([json.dumps(line)]).requests[0].adapter is None
    assert parse_trace([json.dumps(line | {"adapter": "faq"})]).requests[0].adapter == "faq"
    with pytest.raises(TraceError, match="adapter 5 is not an adapter name"):
        parse_trace([json.dumps(line | {"adapter": 5})])
