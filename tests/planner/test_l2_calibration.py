"""The L2 hit cost (fixed + per token) against the AWS/Curvine blog's prompt sweep, and one break-even for plan,
validate and simulate.

The blog (CurvineIO/curvine-doc@984dd4d2:blog/2026-08-13-tiered-kv-cache-sagemaker-hyperpod-curvine/index.md,
"Benchmarking") ran Qwen2-7B-Instruct, TP 1, on two ml.g5.4xlarge nodes: Pod A prefills cold and writes L2, Pod B on
the other node reads the same prompt from L2; 5 output tokens, serial requests. It reports 0.99x at 500 tokens, 1.7x
at 1,000, 2.7x at 2,500 (774 ms cold, 287 ms from L2) and 2.2x at 3,000 (490 ms saved). docs/planning.md derives
the calibration; these tests hold the planner to it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvtier.cli import main
from kvtier.planner.model import TierModel
from kvtier.planner.tiers import tier_model
from kvtier.rules import load_checked
from kvtier.simulate import SimConfig, Trace, TraceRequest, simulate

SPEEDUP = {500: 0.99, 1000: 1.7, 2500: 2.7, 3000: 2.2}
COLD_2500_S, HIT_2500_S = 0.774, 0.287
QWEN2 = "Qwen/Qwen2-7B-Instruct"


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


def _blog_ttfts(model: TierModel, tokens: int, rest_s: float) -> tuple[float, float]:
    """Cold and L2-hit TTFT as the blog measured them: the rest of the request (HTTP, tokenizer, the 5 output tokens)
    plus a full prefill, or plus an L2 hit of N - 1 tokens and the last token's prefill (LMCache: "need to load:
    1924" of 1,925)."""
    cold = rest_s + model.prefill_seconds(tokens)
    last = model.prefill_seconds(tokens) - model.prefill_seconds(tokens - 1)
    return cold, rest_s + model.l2_load_seconds(tokens - 1) + last


def test_the_blogs_sweep_shape_on_its_own_instance_type(config_copy: Path) -> None:
    """Tolerances: the fit points (500 and 2,500 tokens, where the blog gives a ratio and milliseconds) within 0.1x and
    10%; the held-out 1,000-token point within 0.25x (the blog rounds to two digits, one serial run each); at 3,000
    tokens the blog's read slowed more than linearly ("as cross-node read time grows") and the model is optimistic,
    so that point is one-sided."""
    g5 = _tiers(config_copy, "ml.g5.4xlarge")
    rest = COLD_2500_S - g5.prefill_seconds(2500)  # the blog's cold TTFT minus the planner's prefill
    assert 0 <= rest < 0.15, rest  # a few decode steps and HTTP, not a second prefill
    speedup = {}
    for tokens in SPEEDUP:
        cold, hit = _blog_ttfts(g5, tokens, rest)
        speedup[tokens] = cold / hit
    assert _blog_ttfts(g5, 2500, rest)[1] == pytest.approx(HIT_2500_S, rel=0.1)
    assert speedup[2500] == pytest.approx(SPEEDUP[2500], abs=0.1)
    assert speedup[500] == pytest.approx(SPEEDUP[500], abs=0.1)  # no gain at 500 tokens
    assert speedup[1000] == pytest.approx(SPEEDUP[1000], abs=0.25)  # held out
    assert speedup[3000] >= SPEEDUP[3000]
    # The shape: loses or ties below ~500 tokens, wins from 1,000, gains grow with length.
    assert speedup[500] < 1.1 < speedup[1000] < speedup[2500]
    assert 500 <= (g5.l2_break_even_tokens() or 0) <= 1000


def test_without_the_fixed_part_every_chunk_wins(config_copy: Path) -> None:
    """The old model (bytes only) put the break-even at one chunk and predicted a gain already at 500 tokens."""
    g5 = dataclasses.replace(_tiers(config_copy, "ml.g5.4xlarge"), l2_hit_fixed_s=0.0)
    assert g5.l2_break_even_tokens() == g5.chunk_tokens
    rest = COLD_2500_S - g5.prefill_seconds(2500)
    cold, hit = _blog_ttfts(g5, 500, rest)
    assert cold / hit > 1.5  # far from the blog's 0.99x


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
    assert warm == pytest.approx(tiers.l2_load_seconds(tokens) + cold - tiers.prefill_seconds(tokens - 1))
    assert (warm < cold) is l2_wins
