"""One TTFT model (kvtier/planner/ttft.py) against the published measurements in tests/planner/published.py, and one
break-even and one single-request speedup for plan, validate and simulate.

The blog timed requests with five output tokens, so what it measured is TTFT plus four decode steps (each reads
every weight once: weight bytes / GPU memory bandwidth), on both the cold and the cached request. The model keeps
decode out of TTFT; these tests add it back to compare. docs/planning.md ("Calibration against the blog") derives
the A10G figures and explains the points outside 15%.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.catalog import G5_PREFILL_MFU, GB, L2_HIT_FIXED_S, L2_NETWORK_EFFICIENCY
from kvtier.cli import main
from kvtier.planner.model import TierModel
from kvtier.planner.tiers import tier_model
from kvtier.planner.ttft import cold_ttft, l2_hit_ttft, l2_speedup
from kvtier.rules import load_checked
from kvtier.simulate import SimConfig, Trace, TraceRequest, simulate
from tests.planner.published import BURST_GBPS, GPUS, MULTI_TURN, READ, SETUP, SWEEP

QWEN2 = SETUP.model
WITHIN = 0.15  # every published point within 15%, or explained in docs/planning.md


def _endpoint_on(config_dir: Path, instance_type: str, *, max_model_len: int = 16384) -> None:
    """dev's retail endpoint, re-placed: Qwen2-7B on `instance_type` (the blog's model), small L1 for small nodes."""
    env_path = config_dir / "environments" / "dev.yaml"
    env = yaml.safe_load(env_path.read_text())
    env["hyperpod"]["instance_groups"][1]["instance_type"] = instance_type
    env["curvine"]["worker_data_gb"] = 200
    env_path.write_text(yaml.safe_dump(env))
    lob_path = config_dir / "lobs" / "retail.yaml"
    lob = yaml.safe_load(lob_path.read_text())
    lob["endpoints"][0].update(instance_type=instance_type, max_model_len=max_model_len)
    lob["endpoints"][0]["model"]["id"] = QWEN2
    lob["endpoints"][0]["cache"]["l1_gb"] = 4
    lob["l2"]["budget_gb"] = 100
    lob_path.write_text(yaml.safe_dump(lob))


def _tiers(config_dir: Path, instance_type: str) -> TierModel:
    _endpoint_on(config_dir, instance_type)
    return tier_model(load_checked(config_dir, "dev"), "retail", "qwen3-8b")


def _as_blog_ran(tiers: TierModel, instance_type: str) -> TierModel:
    """The tier model with the blog's connector (partial chunks stored) and, on an "up to" network, its burst rate."""
    blog = dataclasses.replace(tiers, save_unfull_chunk=SETUP.save_unfull_chunk, chunk_tokens=SETUP.chunk_tokens)
    burst = BURST_GBPS.get(instance_type)
    if burst is None:
        return blog
    rate = L2_NETWORK_EFFICIENCY.value * burst / 8 * GB
    return dataclasses.replace(blog, l2_load_s_per_token=tiers.kv_bytes_per_token / rate)


def _decode_s(gpu: str) -> float:
    """The blog's four decode steps after the first token, each reading every weight once (memory bound)."""
    weights = 2 * 7.6e9  # Qwen2-7B in 16 bits (the catalog's parameter count)
    return (SETUP.output_tokens - 1) * weights / (GPUS[gpu].memory_gbps * 1e9)


def _timed(tiers: TierModel, gpu: str, tokens: int, *, cached: bool, request_s: float = 0.0) -> float:
    """What the blog's client measured: TTFT + the decode steps + the request's other costs."""
    first = l2_hit_ttft(tiers, tokens) if cached else cold_ttft(tiers, tokens)
    return first.total_s + _decode_s(gpu) + request_s


@pytest.fixture
def g5(config_copy: Path) -> TierModel:
    return _as_blog_ran(_tiers(config_copy, SWEEP.instance_type), SWEEP.instance_type)


def test_the_a10g_figures_are_the_ones_the_sweep_implies(g5: TierModel) -> None:
    """Two numbers, two unknowns: 774 ms cold at 2,500 tokens (four decode steps and the prefill) gives prefill_mfu;
    287 ms from L2 (decode, the last token, the bytes at the burst rate) leaves the per-hit overhead."""
    prefill_s = SWEEP.cold_2500_s - _decode_s("A10G")
    mfu = G5_PREFILL_MFU.value * g5.prefill_seconds(2500) / prefill_s
    hit = l2_hit_ttft(g5, 2500)
    overhead = SWEEP.hit_2500_s - _decode_s("A10G") - hit.prefill_s - hit.l2_read_s
    assert mfu == pytest.approx(G5_PREFILL_MFU.value, rel=0.01)
    assert overhead == pytest.approx(L2_HIT_FIXED_S.value, rel=0.02)
    assert g5.l2_hit_fixed_s == L2_HIT_FIXED_S.value


def test_the_g5_sweep_within_fifteen_percent_but_3000_tokens(g5: TierModel) -> None:
    """500, 1,000 and 2,500 tokens within 15%. At 3,000 tokens the blog's hit took 408 ms (490 ms saved at 2.2x),
    121 ms more than at 2,500 for 500 more tokens (29 MB: 0.24 GB/s at the margin): its read slowed down, "as
    cross-node read time grows" (the blog), which no per-token rate reproduces; the model is optimistic there."""
    for tokens, measured in SWEEP.speedup:
        cold = _timed(g5, "A10G", tokens, cached=False)
        hit = _timed(g5, "A10G", tokens, cached=True)
        if tokens == 3000:
            assert cold == pytest.approx(SWEEP.saved_3000_s * 2.2 / 1.2, rel=WITHIN)  # the cold side still fits
            assert hit < SWEEP.saved_3000_s / 1.2 * 0.8  # the hit is what the model cannot follow
            assert cold / hit > measured * (1 + WITHIN)
        else:
            assert cold / hit == pytest.approx(measured, rel=WITHIN), tokens
    assert _timed(g5, "A10G", 2500, cached=False) == pytest.approx(SWEEP.cold_2500_s, rel=0.01)
    assert _timed(g5, "A10G", 2500, cached=True) == pytest.approx(SWEEP.hit_2500_s, rel=0.01)


def test_the_1925_token_read(config_copy: Path) -> None:
    """The only L2 read timed on its own: 1,925 tokens of Qwen2-7B (110.4e6 B) in 55.75 ms between two G6e nodes."""
    g6e = _tiers(config_copy, READ.instance_type)
    assert g6e.l2_read_seconds(READ.tokens) == pytest.approx(READ.seconds, rel=0.01)
    # plan's row for it is the read alone; the TTFT of that hit adds the overhead and the last token.
    hit = l2_hit_ttft(dataclasses.replace(g6e, save_unfull_chunk=True), READ.tokens + 1)
    assert hit.l2_read_s == pytest.approx(READ.seconds, rel=0.01)
    assert hit.total_s > hit.l2_read_s + g6e.l2_hit_fixed_s


def _multi_turn(writer: TierModel, writer_gpu: str, reader: TierModel, reader_gpu: str) -> tuple[list[float], ...]:
    """Per-turn first pass and replay times, the request's other costs fitted to the first pass's 4.21 s."""
    cold = [_timed(writer, writer_gpu, n, cached=False) for n in MULTI_TURN.turns]
    request_s = (MULTI_TURN.first_pass_s - sum(cold)) / len(cold)
    cold = [c + request_s for c in cold]
    hit = [_timed(reader, reader_gpu, n, cached=True, request_s=request_s) for n in MULTI_TURN.turns]
    return cold, hit


def test_the_g6e_multi_turn_run_as_captioned_cannot_be_a_cache_effect(config_copy: Path, tmp_path: Path) -> None:
    """As Figure 4's caption orders them, Pod A (ml.g6e.4xlarge, L40S) wrote and Pod B (ml.g6.16xlarge, L4) replayed.
    The L4 decodes four steps in 203 ms against the L40S's 70 ms, and prefills at a third of its rate; even with no
    per-hit overhead at all the replay comes out slower than the first pass, not 1.30x faster. So the blog's gain
    cannot come from the cache alone under that ordering (docs/planning.md). With the roles the other way round
    (the L4 wrote, the L40S replayed), the model lands within 15% of the total and the first turn."""
    l40s = _as_blog_ran(_tiers(config_copy, MULTI_TURN.writer_instance_type), MULTI_TURN.writer_instance_type)
    # ml.g6.16xlarge is not in the catalog: an L4 at the prefill_mfu of ml.g6e.4xlarge (the catalog's default),
    # reading at 25 Gbps x 0.794.
    l4_flops = GPUS["L4"].bf16_dense_tflops / GPUS["L40S"].bf16_dense_tflops
    l4 = _as_blog_ran(
        dataclasses.replace(
            l40s,
            prefill_s_per_token=l40s.prefill_s_per_token / l4_flops,
            prefill_s_per_token_squared=l40s.prefill_s_per_token_squared / l4_flops,
        ),
        MULTI_TURN.reader_instance_type,
    )
    cold, hit = _multi_turn(l40s, "L40S", dataclasses.replace(l4, l2_hit_fixed_s=0.0), "L4")
    assert sum(cold) / sum(hit) < 1.0 < MULTI_TURN.speedup
    cold, hit = _multi_turn(l4, "L4", l40s, "L40S")
    assert sum(cold) / sum(hit) == pytest.approx(MULTI_TURN.speedup, rel=WITHIN)
    assert cold[0] / hit[0] == pytest.approx(MULTI_TURN.first_turn_speedup, rel=WITHIN)


@pytest.mark.parametrize("tokens", [300, 500, 1000, 1925, 2500, 3000, 4096, 8000])
def test_plan_and_simulate_agree_on_a_single_request_speedup(config_copy: Path, tokens: int) -> None:
    """Replica 0 prefills a prompt and writes L2; replica 1 reads it. The simulated TTFTs are the model's, with the
    whole chunks LMCache stores (kvtier renders save_unfull_chunk false: 768 of 1,000 tokens at chunk 256)."""
    tiers = _tiers(config_copy, "ml.g6e.4xlarge")
    blocks = tuple(range(-(-tokens // 512)))
    trace = Trace((TraceRequest(0.0, tokens, 1, blocks), TraceRequest(60_000.0, tokens, 1, blocks)), 512, "t")
    result = simulate(trace, tiers, SimConfig(routing="roundrobin"))
    assert result.tokens.l2_other == tokens // 256 * 256
    cold = cold_ttft(tiers, tokens).total_s
    warm = 2 * result.ttft_s["mean"] - cold
    assert cold / warm == pytest.approx(l2_speedup(tiers, tokens), rel=0.05)
    assert warm == pytest.approx(l2_hit_ttft(tiers, tokens).total_s, rel=1e-9)


def _implied_range(g5: TierModel, g6e: TierModel) -> tuple[float, float]:
    """The sweep puts the g5 break-even between 500 (0.99x) and 1,000 tokens (1.7x). The fixed part is the same
    software path on both; per token an L2 hit saves (prefill - load) seconds, so the g6e break-even is the g5 one x
    the ratio of those savings (linear terms: attention adds < 3% at these lengths)."""
    ratio = (g5.prefill_s_per_token - g5.l2_load_s_per_token) / (g6e.prefill_s_per_token - g6e.l2_load_s_per_token)
    return 500 * ratio, 1000 * ratio


def test_break_even_of_qwen2_7b_on_g6e_4xlarge_is_in_the_range_the_sweep_implies(
    config_copy: Path, tmp_path: Path
) -> None:
    g5 = _tiers(config_copy, "ml.g5.4xlarge")
    g6e_dir = tmp_path / "g6e"
    shutil.copytree(config_copy, g6e_dir)
    g6e = _tiers(g6e_dir, "ml.g6e.4xlarge")
    low, high = _implied_range(g5, g6e)
    assert 1500 < low < high < 4500  # what docs/planning.md states
    even = g6e.l2_break_even_tokens()
    assert even is not None and low <= even <= high
    assert even == 2304  # docs/planning.md and docs/benchmarks.md quote it


def _plan_break_even(config_dir: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    assert main(["plan", "--config-dir", str(config_dir), "--json"]) == 0
    (endpoint,) = json.loads(capsys.readouterr().out)["endpoints"]
    return endpoint["break_even_tokens"]


def test_plan_validate_and_simulate_agree_on_the_break_even(
    config_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _endpoint_on(config_copy, "ml.g6e.4xlarge")
    even = _plan_break_even(config_copy, capsys)
    assert even == 2304
    # validate: a max_model_len below it draws the L2 warning, naming the same number; at it, no warning.
    _endpoint_on(config_copy, "ml.g6e.4xlarge", max_model_len=even - 256)
    warnings = [str(w) for w in load_checked(config_copy, "dev").warnings]
    assert any(f"beats recomputing only above {even:,} tokens" in w for w in warnings), warnings
    _endpoint_on(config_copy, "ml.g6e.4xlarge", max_model_len=even)
    assert not any("beats recomputing" in str(w) for w in load_checked(config_copy, "dev").warnings)
    # simulate reports it, from the same tier model.
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}) + "\n")
    _endpoint_on(config_copy, "ml.g6e.4xlarge")
    args = ["simulate", "--config-dir", str(config_copy), "--trace", str(trace), "--json", "--no-plots"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["l2_break_even_tokens"] == even


@pytest.mark.parametrize(("tokens", "l2_wins"), [(1536, False), (2048, False), (3072, True), (4096, True)])
def test_a_simulated_cross_replica_l2_hit_pays_off_exactly_past_the_break_even(
    config_copy: Path, tokens: int, l2_wins: bool
) -> None:
    """Replica 0 prefills a prompt and writes L2; replica 1 (round-robin) then reads the whole prompt from L2. Its
    TTFT beats the cold one exactly when the prompt is past the planner's break-even (2,304 tokens)."""
    tiers = _tiers(config_copy, "ml.g6e.4xlarge")
    blocks = tuple(range(tokens // 512))
    trace = Trace((TraceRequest(0.0, tokens, 1, blocks), TraceRequest(60_000.0, tokens, 1, blocks)), 512, "t")
    result = simulate(trace, tiers, SimConfig(routing="roundrobin"))
    assert result.tokens.l2_other == tokens  # the second request read it all from the other replica's writes
    cold = tiers.prefill_seconds(tokens)  # the first request: nothing cached, no queue
    warm = 2 * result.ttft_s["mean"] - cold
    assert warm == pytest.approx(l2_hit_ttft(tiers, tokens).total_s)
    assert (warm < cold) is l2_wins
