"""Issue 36's model kinds on real engines (tests/engine/model_kinds.py): a tiny mixture-of-experts model, a tiny MLA
model, the tiny dense model with an FP8 KV cache and a tiny sliding-window hybrid, each on both connectors (the
hybrid on LMCache's only: kvtier refuses it on vLLM's) with the settings kvtier renders. Per
kind and connector: a cross-engine L2 hit, greedy output equal to the same engine settings with the tiers off
(token ids), and the L2 bytes per token equal to kvtier's formula for that attention kind and KV dtype, within the
file format's header (LMCache 0.4.3's `save_chunk_meta`: 28 bytes a file; vLLM's fs tier: none). The planned
prefill FLOPs of the tiny MoE follow its active parameters, counted in the real checkpoint's weights.

One engine group per kind (the tiers-off reference R, then a writer and a reader per connector), started once; the
checks below are its phases. A kind this CPU cannot run is skipped with the reason (model_kinds.KIND_ISA).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.model_kinds import (
    BREAK_ENV,
    CONNECTORS,
    KINDS,
    OUTPUT_TOKENS,
    PROMPT_TOKENS,
    SELECT_ENV,
    KindRun,
    PairRun,
    cpu_flags,
    missing_isa,
    rotary_check,
    scenario,
)
from tests.engine.model_kinds_report import write as write_section

REPORT_ENV = "KVTIER_ENGINE_KINDS_REPORT"  # a folder: one JSON per kind (what docs/benchmarks.md was written from)


@pytest.fixture(scope="module", params=list(KINDS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindRun]:
    kind = str(request.param)
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    reason = missing_isa(kind, cpu_flags())
    if reason:
        pytest.skip(f"{kind}: {reason}")
    selected = [k for k in os.environ.get(SELECT_ENV, "").split(",") if k]
    if selected and kind not in selected:
        pytest.skip(f"{kind} is not in {SELECT_ENV}={','.join(selected)}")
    result = scenario(python, tmp_path_factory.mktemp(f"kind-{kind}"), kind, os.environ.get(BREAK_ENV) or None)
    print(f"\nmodel kind {kind}: {json.dumps({k: round(v, 1) for k, v in result.timings_s.items()})}")
    report = os.environ.get(REPORT_ENV)
    if report:
        Path(report).mkdir(parents=True, exist_ok=True)
        (Path(report) / f"{kind}.json").write_text(json.dumps(dataclasses.asdict(result), indent=1, default=str))
    bench_doc = os.environ.get("KVTIER_ENGINE_BENCH_DOC")
    if bench_doc:
        write_section(Path(bench_doc), result)
    yield result


# The pairs validate refuses among the kinds run here (docs/l2.md "Model kinds and connectors"): vLLM's connector
# keeps a hybrid model's local layers apart and loads only their window, which kvtier does not size.
REFUSED = {("swa", "vllm")}


@pytest.mark.engine
def test_kvtier_refuses_exactly_the_unsupported_pairs(run: KindRun) -> None:
    """validate's refusals are the support table: every pair runs here except the ones kvtier refuses."""
    refused = {(run.kind, connector) for connector, pair in run.pairs.items() if pair.refusals}
    expected = {(kind, connector) for kind, connector in REFUSED if kind == run.kind}
    assert refused == expected, {c: p.refusals for c, p in run.pairs.items()}


def _served(run: KindRun, connector: str) -> PairRun:
    pair = run.pairs[connector]
    if pair.refusals:
        pytest.skip(f"kvtier refuses {run.kind} on {connector}, so no engine runs it: {pair.refusals[0]}")
    return pair


@pytest.mark.engine
@pytest.mark.parametrize("connector", CONNECTORS)
def test_the_reader_hits_every_full_file_from_l2(run: KindRun, connector: str) -> None:
    pair = _served(run, connector)
    a, b = pair.readings["A"], pair.readings["B"]
    full = PROMPT_TOKENS // pair.file_tokens * pair.file_tokens
    assert a.prompt_tokens == b.prompt_tokens == PROMPT_TOKENS, (a, b)
    assert a.external_hits_delta == 0, f"{run.kind}/{connector}: the writer found KV before anyone wrote: {a}"
    assert b.external_hits_delta == full, (
        f"{run.kind}/{connector}: B took {b.external_hits_delta:g} tokens from L2, not the {full} tokens of A's "
        f"{pair.file_tokens}-token files: {b}"
    )
    written = [n for n in b.new_files if n.endswith((".data", ".bin"))]
    assert not written, f"{run.kind}/{connector}: B wrote files A had written: {written[:3]}"


# MLA's engines run vLLM's PyTorch rotary embedding (model_kinds.NATIVE_ROPE): vLLM-CPU's kernel makes an MLA token's
# KV and output depend on how its prompt was batched, so a reader that loads the prompt answers differently from an
# engine that prefilled it, on both connectors alike (test_vllm_cpu_rotary_kernel_depends_on_the_step_for_mla_tensors
# _only; `KVTIER_KINDS_BREAK=rope` runs the kernel and this test fails for MLA).


@pytest.mark.engine
@pytest.mark.parametrize("connector", CONNECTORS)
def test_greedy_output_equals_the_tiers_off_run(run: KindRun, connector: str) -> None:
    """Token ids of OUTPUT_TOKENS greedy tokens: the writer (computed), the reader (A's KV from L2) and R (no KV
    connector at all) agree."""
    assert run.reference is not None
    reference = run.reference.token_ids
    assert len(reference) == OUTPUT_TOKENS, run.reference
    pair = _served(run, connector)
    for role in ("A", "B"):
        got = pair.readings[role].token_ids
        assert got == reference, f"{run.kind}/{connector} {role}: {got} != tiers off {reference}"


@pytest.mark.engine
def test_vllm_cpu_rotary_kernel_depends_on_the_step_for_mla_tensors_only() -> None:
    """The upstream engine limitation the MLA engines' NATIVE_ROPE fit works around, shown on vLLM-CPU's own kernel
    (tests/engine/mla_rope.py, no engine): on the tensors a GQA layer passes, `torch.ops._C.rotary_embedding` rotates
    as vLLM's PyTorch code does and a token's rotation is the same whatever else its step computes; on the ones
    DeepSeek-V2's MLA layer passes (a [tokens, heads, rope] view, and k_pe inside the [tokens, latent + rope]
    projection) it is neither, and it writes into the latent the layer caches. If this fails, vLLM-CPU has fixed its
    kernel: the fit goes (docs/l2.md, "Model kinds and connectors"; docs/references.md)."""
    python = os.environ.get("KVTIER_ENGINE_PYTHON")
    if not python or not Path(python).exists():
        pytest.fail("KVTIER_ENGINE_PYTHON does not name the engine venv's python; run `make test-engine`")
    result = rotary_check(python)
    gqa, mla = result["gqa"], result["mla"]
    rounding = 0.02  # bf16: the kernel rotates in fp32 and rounds once, PyTorch rounds per operation
    assert gqa["query_vs_native"] <= rounding * gqa["scale"] and gqa["key_vs_native"] <= rounding * gqa["scale"], gqa
    assert gqa["token0_query_alone_vs_in_step"] == gqa["token0_key_alone_vs_in_step"] == 0, gqa
    assert mla["query_vs_native"] > 0.5 * mla["scale"] and mla["key_vs_native"] > 0.5 * mla["scale"], mla
    assert mla["token0_query_alone_vs_in_step"] > 0.5 * mla["scale"], mla
    assert mla["latent_rows_overwritten"], mla


@pytest.mark.engine
def test_every_writer_matches_and_readers_agree_across_connectors(run: KindRun) -> None:
    """Whatever the engine does after a load: each writer's output is the tiers-off run's, and the readers of the two
    connectors (different file formats, the same KV) answer the same token ids."""
    assert run.reference is not None
    served = run.served_pairs()
    for connector, pair in served.items():
        assert pair.readings["A"].token_ids == run.reference.token_ids, f"{run.kind}/{connector} writer"
    readers = {connector: pair.readings["B"].token_ids for connector, pair in served.items()}
    assert len(set(map(tuple, readers.values()))) == 1, readers


@pytest.mark.engine
@pytest.mark.parametrize("connector", CONNECTORS)
def test_l2_bytes_per_token_are_the_planners(run: KindRun, connector: str) -> None:
    """Every file A wrote holds file_tokens x kvtier's bytes per token (attention kind, KV dtype) plus the header the
    connector states (Connector.l2_file_overhead_bytes), and A wrote one file per full unit of the prompt."""
    pair = _served(run, connector)
    files = pair.data_files()
    assert len(files) == PROMPT_TOKENS // pair.file_tokens, f"{run.kind}/{connector}: {sorted(files)[:3]}"
    expected = pair.file_tokens * pair.formula_bytes_per_token + pair.overhead_bytes
    wrong = {n: size for n, size in files.items() if size != expected}
    assert not wrong, (
        f"{run.kind}/{connector}: files of {sorted(set(wrong.values()))} bytes, where kvtier plans {pair.file_tokens} "
        f"x {pair.formula_bytes_per_token} + {pair.overhead_bytes} = {expected}"
    )
    outside = [n for n in files if not n.startswith(f"{pair.identity_dir}/")]
    assert not outside, (
        f"{run.kind}/{connector}: files outside the identity directory {pair.identity_dir}: {outside[:3]}"
    )


@pytest.mark.engine
def test_planned_prefill_flops_follow_the_active_parameters(run: KindRun) -> None:
    """kvtier's shape of the checkpoint (a LOB `models` entry copied from its config.json) plans the parameters the
    weights show: active = all but the experts a token does not run, computed = active less the embedding and the
    LM head, prefill FLOPs 2 x computed per token (a MoE below its total)."""
    census, model = run.census, run.model
    assert model["params"] == census["total"], (model, census)
    assert model["active_params"] == census["active"], (model, census)
    assert model["computed_params"] == census["active"] - census["embedding_and_head"], (model, census)
    assert model["linear_flops_per_token"] == 2 * model["computed_params"]
    if run.config.get("num_experts") or run.config.get("num_local_experts") or run.config.get("n_routed_experts"):
        assert census["idle_experts"] > 0 and model["active_params"] < model["params"], census


# --- without an engine (make test) ---


def test_each_kind_says_which_isa_it_needs() -> None:
    avx512 = "flags\t\t: fpu sse avx2 avx512f avx512_bf16\n"
    avx2 = "flags\t\t: fpu sse avx2\n"
    assert all(missing_isa(kind, cpu_flags(avx512)) is None for kind in KINDS)
    reason = missing_isa("fp8", cpu_flags(avx2))
    assert reason is not None and "AVX-512 or AMX" in reason
    assert missing_isa("moe", cpu_flags(avx2)) is None and missing_isa("mla", cpu_flags(avx2)) is None
    assert missing_isa("fp8", cpu_flags("flags : avx2 amx_tile amx_bf16\n")) is None


def test_each_break_makes_kvtier_plan_wrongly(tmp_path: Path) -> None:
    """The self-check's breaks reach kvtier's formulas (the engine run then fails the byte and FLOPs checks)."""
    from kvtier.catalog import MODELS, as_served
    from kvtier.connectors.lmcache import LMCACHE
    from tests.engine.model_kinds import broken

    fp8 = as_served(MODELS["Qwen/Qwen3-8B"], "fp8", None)
    moe = MODELS["Qwen/Qwen3-30B-A3B-Instruct-2507"]
    right = (fp8.kv_bytes_per_token, LMCACHE.FILE_HEADER_BYTES, moe.active_params)
    for what, index in (("kv-dtype", 0), ("header", 1), ("active", 2)):
        with broken(what):
            wrong = (fp8.kv_bytes_per_token, LMCACHE.FILE_HEADER_BYTES, moe.active_params)
        assert wrong[index] != right[index] and [w for i, w in enumerate(wrong) if i != index] == [
            r for i, r in enumerate(right) if i != index
        ], what
    assert (fp8.kv_bytes_per_token, LMCACHE.FILE_HEADER_BYTES, moe.active_params) == right  # restored
    with pytest.raises(ValueError, match=BREAK_ENV), broken("nonsense"):
        pass
