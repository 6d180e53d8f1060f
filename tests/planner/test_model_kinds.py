"""Issue 36: mixture-of-experts, quantized weights, FP8 KV cache, MLA and sliding-window attention, sized, planned,
validated, identified and rendered.

The done-when: the FP8 Qwen3-30B-A3B checkpoint validates on ml.g6e.4xlarge, its bf16 checkpoint is refused with a
fix naming FP8 or tensor parallel, and plan's TTFT for a MoE follows its active parameters.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from kvtier.catalog import GIB, INSTANCE_TYPES, MODELS, as_served
from kvtier.cli import main
from kvtier.config.endpoint import Endpoint, ModelShape
from kvtier.connectors import connector_named
from kvtier.errors import ConfigError
from kvtier.k8s.operator_endpoint import vllm_args
from kvtier.planner.gpu import kv_bytes_per_token_per_gpu
from kvtier.planner.speed import speeds
from kvtier.rules import load_checked

MOE = "Qwen/Qwen3-30B-A3B-Instruct-2507"
MOE_FP8 = MOE + "-FP8"
G6E_4XL = INSTANCE_TYPES["ml.g6e.4xlarge"]


def _retail(config_dir: Path, model_id: str, shape: dict[str, object] | None = None, **endpoint: object) -> Path:
    path = config_dir / "lobs" / "retail.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["endpoints"][0]["model"]["id"] = model_id
    if shape is not None:
        doc["models"] = {model_id: shape}
    doc["endpoints"][0].update(endpoint)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _errors(config_dir: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_checked(config_dir, "dev")
    return [str(p) for p in caught.value.problems]


# ---- shape arithmetic -------------------------------------------------------------------------------------------


def test_qwen3_moe_parameters_from_its_experts() -> None:
    """30.5 B total; 48 layers x 120 idle experts x 3 x 2,048 x 768 off it leaves 3.32 B active (the card's 3.3 B);
    less the embedding and LM head (151,936 x 2,048, twice) 2.70 B computed per token."""
    moe = MODELS[MOE]
    idle = 48 * (128 - 8) * 3 * 2048 * 768
    assert moe.active_params == pytest.approx(30.5e9 - idle)
    assert moe.active_params / 1e9 == pytest.approx(3.32, abs=0.01)
    assert moe.computed_params == pytest.approx(30.5e9 - idle - 2 * 151936 * 2048)
    # Prefill FLOPs follow the computed (active) parameters, not the total.
    assert moe.linear_flops_per_token == pytest.approx(2 * moe.computed_params)
    assert moe.linear_flops_per_token < 0.1 * 2 * moe.params


def test_weights_follow_the_format() -> None:
    """bf16: 2 bytes a parameter (56.8 GiB, the issue's refusal); FP8: 1 byte, the 16-bit embedding and head kept
    (31.2 GB, the checkpoint's 'about 31 GB')."""
    assert MODELS[MOE].weight_bytes / GIB == pytest.approx(56.8, abs=0.05)
    embedding = 2 * 151936 * 2048
    assert MODELS[MOE_FP8].weight_bytes == pytest.approx(30.5e9 - embedding + 2 * embedding)
    assert MODELS[MOE_FP8].weight_bytes / 1e9 == pytest.approx(31.1, abs=0.1)


@pytest.mark.parametrize(
    ("model_id", "kv_cache_dtype", "per_token"),
    [
        ("Qwen/Qwen3-8B", "auto", 2 * 36 * 8 * 128 * 2),
        ("Qwen/Qwen3-8B", "fp8", 2 * 36 * 8 * 128 * 1),  # FP8 halves every tier's bytes
        (MOE, "auto", 2 * 48 * 4 * 128 * 2),
        ("deepseek-ai/DeepSeek-V2-Lite-Chat", "auto", 27 * (512 + 64) * 2),  # MLA: one latent per layer
        ("google/gemma-3-27b-it", "auto", 2 * 62 * 16 * 128 * 2),  # every layer of every token, windows or not
    ],
)
def test_kv_bytes_per_token_by_attention_kind_and_kv_dtype(model_id: str, kv_cache_dtype: str, per_token: int) -> None:
    model = as_served(MODELS[model_id], kv_cache_dtype, None)  # type: ignore[arg-type]
    assert model.kv_bytes_per_token == per_token
    # L0: MLA's latent is whole on every rank; GQA's heads split over TP.
    if model.attention == "mla":
        assert kv_bytes_per_token_per_gpu(model, 2) == per_token
    else:
        assert kv_bytes_per_token_per_gpu(model, 2) == per_token // 2


def test_fp8_matmuls_on_the_l40s_and_not_on_the_a10g() -> None:
    """An FP8 checkpoint's prefill runs at the L40S's 733 dense FP8 TFLOPS; the A10G has no FP8 tensor cores."""
    fp8, bf16 = MODELS[MOE_FP8], MODELS[MOE]
    l40s_fp8, l40s_bf16 = speeds(fp8, G6E_4XL, 1), speeds(bf16, G6E_4XL, 1)
    assert l40s_fp8.prefill_tflops == pytest.approx(733.0 * 0.5)
    assert l40s_bf16.prefill_tflops == pytest.approx(362.05 * 0.5)
    g5 = INSTANCE_TYPES["ml.g5.12xlarge"]
    assert speeds(fp8, g5, 4).prefill_tflops == speeds(bf16, g5, 4).prefill_tflops


# ---- bad input: one line each ------------------------------------------------------------------------------------

SHAPE: dict[str, object] = {"layers": 2, "attention_heads": 4, "kv_heads": 2, "head_dim": 64, "params_billion": 1.0}


@pytest.mark.parametrize(
    ("extra", "field", "fix"),
    [
        ({"active_params_billion": 2.0}, "active_params_billion", "the per-token share"),
        ({"kv_lora_rank": 512}, "kv_lora_rank", "set attention: mla"),
        ({"attention": "mla", "kv_lora_rank": 512}, "qk_rope_head_dim", "copy kv_lora_rank and qk_rope_head_dim"),
        ({"experts": 4, "experts_per_token": 8}, "experts_per_token", "num_experts_per_tok"),
        ({"local_layers": 1}, "local_layers", "sliding_window"),
    ],
)
def test_contradictory_shapes_are_one_line_each(
    config_copy: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, object], field: str, fix: str
) -> None:
    lob = _retail(config_copy, "acme/m1", {**SHAPE, **extra})
    assert main(["validate", "--config-dir", str(config_copy)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"kvtier validate: {lob}: models.acme/m1.{field}: ") and fix in line, line


def test_a_weight_format_the_checkpoint_is_not_in_is_refused(config_copy: Path) -> None:
    lob = _retail(config_copy, MOE, weight_format="fp8")
    (line,) = _errors(config_copy)
    assert line.startswith(f"{lob}: endpoints[0].weight_format: fp8 (--quantization fp8) does not match {MOE}, whose ")
    assert "-FP8" in line
    _retail(config_copy, MOE_FP8, weight_format="fp8")  # the FP8 checkpoint said so explicitly: fine
    load_checked(config_copy, "dev")


# ---- done when ---------------------------------------------------------------------------------------------------


def test_the_fp8_moe_fits_one_l40s_and_the_bf16_one_is_refused_naming_fp8_and_tp(config_copy: Path) -> None:
    _retail(config_copy, MOE_FP8)
    load_checked(config_copy, "dev")  # validates on ml.g6e.4xlarge
    lob = _retail(config_copy, MOE)
    (line,) = _errors(config_copy)
    assert line.startswith(f"{lob}: endpoints[0].tensor_parallel: {MOE} needs 56.8 GiB of weights per GPU"), line
    assert f"serve its FP8 checkpoint {MOE_FP8}" in line and "use tensor_parallel 2" in line, line


def _plan(config_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["plan", "--config-dir", str(config_dir), "--json", "--tokens", "4096"]) == 0
    (endpoint,) = json.loads(capsys.readouterr().out)["endpoints"]
    return endpoint  # type: ignore[no-any-return]


def test_plan_ttft_of_a_moe_follows_its_active_parameters(
    config_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The FP8 Qwen3-30B-A3B prefills 4,096 tokens from its 2.70 B computed parameters, at FP8 speed; described as a
    dense model of the same 30.5 B it would take ten times as long."""
    _retail(config_copy, MOE_FP8)
    moe = _plan(config_copy, capsys)
    model = MODELS[MOE_FP8]
    s = speeds(model, G6E_4XL, 1)
    flops = model.prefill_flops(4096)
    assert moe["recompute"]["seconds"] == pytest.approx(flops / (s.prefill_tflops * 1e12) + s.forward_floor_s)  # type: ignore[index]
    dense = dataclasses.replace(model, experts=None, experts_per_token=None, moe_intermediate_size=None)
    assert dense.prefill_flops(4096) > 8 * flops


def test_kv_cache_dtype_and_weight_format_are_rendered_and_in_the_identity() -> None:
    base = {
        "name": "e",
        "model": {"source": "huggingface", "id": MOE_FP8, "revision": "0" * 40},
        "instance_type": "ml.g6e.4xlarge",
    }
    plain = Endpoint.model_validate(base)
    fp8 = Endpoint.model_validate({**base, "kv_cache_dtype": "fp8", "weight_format": "fp8"})
    assert "--kv-cache-dtype" not in vllm_args(plain) and "--quantization" not in vllm_args(plain)
    args = vllm_args(fp8)
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8" and args[args.index("--quantization") + 1] == "fp8"
    for name in ("lmcache", "vllm"):
        connector = connector_named(name)
        facts = connector.identity_facts(fp8)
        assert facts["kv_cache_dtype"] == "fp8" and facts["weight_format"] == "fp8"
        # At their defaults the facts are left out: no existing identity moves.
        assert "kv_cache_dtype" not in connector.identity_facts(plain)
        assert connector.l2_identity(plain) != connector.l2_identity(fp8)


# ---- engine support: what each connector refuses ---------------------------------------------------------------


def test_sliding_window_on_vllms_connector_is_refused_with_lmcache_as_the_way(config_copy: Path) -> None:
    lob = _retail(config_copy, "openai/gpt-oss-20b", mode="standalone", cache={"connector": "vllm", "l1_gb": 20})
    (line,) = _errors(config_copy)
    assert line.startswith(f"{lob}: endpoints[0].cache.connector: openai/gpt-oss-20b has 12 sliding-window layers")
    assert "use connector: lmcache" in line
    _retail(config_copy, "openai/gpt-oss-20b", mode="standalone", cache={"connector": "lmcache", "l1_gb": 20})
    load_checked(config_copy, "dev")


def test_mla_with_fp8_kv_on_lmcache_is_refused(config_copy: Path) -> None:
    lob = _retail(config_copy, "deepseek-ai/DeepSeek-V2-Lite-Chat", kv_cache_dtype="fp8")
    (line,) = _errors(config_copy)
    assert line.startswith(f"{lob}: endpoints[0].kv_cache_dtype: deepseek-ai/DeepSeek-V2-Lite-Chat uses MLA")
    _retail(config_copy, "deepseek-ai/DeepSeek-V2-Lite-Chat", kv_cache_dtype="auto")
    load_checked(config_copy, "dev")


def test_every_catalog_model_parses_as_a_lob_description() -> None:
    """What the catalog says of each model, a LOB file can say too (the same validators)."""
    for model in MODELS.values():
        extras = {
            k: getattr(model, k)
            for k in ("vocab_size", "hidden_size", "experts", "experts_per_token", "attention", "local_layers")
        }
        ModelShape.model_validate(
            {
                "layers": model.layers,
                "attention_heads": model.attention_heads,
                "kv_heads": model.kv_heads,
                "head_dim": model.head_dim,
                "params_billion": model.params_billion,
                "active_params_billion": model.active_params_billion,
                "kv_lora_rank": model.kv_lora_rank,
                "qk_rope_head_dim": model.qk_rope_head_dim,
                "sliding_window": model.sliding_window,
                "weight_format": model.weight_format,
                **extras,
            }
        )


# ---- issue 36, second pass ---------------------------------------------------------------------------------------


def test_mxfp4_quantizes_the_experts_only() -> None:
    """gpt-oss keeps attention, router, embedding and head in BF16 (its quantization_config's
    modules_to_not_convert): 24 layers x 32 experts x 3 x 2,880^2 = 19.1 B expert parameters at 4.25 bits, the other
    1.8 B at 2 bytes: 13.7 GB, the checkpoint's size (13.8 GB), where counting every non-embedding weight as MXFP4
    gave 12.8 GB."""
    oss = MODELS["openai/gpt-oss-20b"]
    experts = 24 * 32 * 3 * 2880 * 2880
    assert oss.expert_params == experts
    assert oss.weight_bytes == pytest.approx(experts * (0.5 + 1 / 32) + (20.9e9 - experts) * 2)
    assert oss.weight_bytes / 1e9 == pytest.approx(13.7, abs=0.05)


def test_mla_with_fp8_e5m2_is_refused_on_every_connector(config_copy: Path) -> None:
    """No vLLM MLA attention backend takes fp8_e5m2: one line, whichever connector (the engine refuses first)."""
    for cache in ({"connector": "lmcache"}, {"connector": "vllm", "l1_gb": 20}):
        lob = _retail(
            config_copy, "deepseek-ai/DeepSeek-V2-Lite-Chat", kv_cache_dtype="fp8_e5m2", mode="standalone", cache=cache
        )
        (line,) = _errors(config_copy)
        assert line.startswith(
            f"{lob}: endpoints[0].kv_cache_dtype: fp8_e5m2 with deepseek-ai/DeepSeek-V2-Lite-Chat"
        ), line
        assert "use kv_cache_dtype: auto" in line, line
    # vLLM's connector stores MLA with an FP8 (e4m3) cache: validates.
    _retail(
        config_copy,
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        kv_cache_dtype="fp8",
        mode="standalone",
        cache={"connector": "vllm", "l1_gb": 20},
    )
    load_checked(config_copy, "dev")


def test_operator_mode_renders_both_flags_within_the_crd(config_copy: Path) -> None:
    """The CRD's worker.args takes any strings: both flags reach the operator's vLLM, the object validates against
    the pinned CRD, and the L2 identity the Kyverno Policy builds the URL from (an env value) follows the KV dtype."""
    from kvtier.k8s.operator_endpoint import inference_endpoint_config
    from kvtier.serving import L2_IDENTITY_VAR
    from tests.k8s.test_operator_endpoint import IEC_CRD
    from tests.support import shared_path
    from tests.validation import crd_errors

    _retail(config_copy, MOE_FP8, kv_cache_dtype="fp8", weight_format="fp8")
    config = load_checked(config_copy, "dev")
    endpoint = config.lob("retail").endpoints[0]
    assert endpoint.mode == "operator"
    iec = inference_endpoint_config(config.env, "retail", endpoint)
    assert crd_errors(shared_path(IEC_CRD), "v1", iec) == []
    args = iec["spec"]["worker"]["args"]
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8" and args[args.index("--quantization") + 1] == "fp8"
    identity = {e["name"]: e.get("value") for e in iec["spec"]["worker"]["environmentVariables"]}[L2_IDENTITY_VAR]
    plain = inference_endpoint_config(config.env, "retail", endpoint.model_copy(update={"kv_cache_dtype": "auto"}))
    assert (
        identity
        != {e["name"]: e.get("value") for e in plain["spec"]["worker"]["environmentVariables"]}[L2_IDENTITY_VAR]
    )
