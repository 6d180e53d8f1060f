"""L0: what one replica's GPUs hold once vLLM has loaded the weights (docs/planning.md, "Tiers")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.catalog import GIB, GPU_RESERVE_GIB, Gpu, Model


def kv_bytes_per_token_per_gpu(model: Model, tensor_parallel: int) -> int:
    """vLLM splits KV heads over the TP ranks; with more ranks than KV heads each rank keeps a whole head. MLA's
    latent has no heads to split: every rank keeps all of it (vLLM's MLAAttentionSpec, one KV head). Bytes per
    element follow the endpoint's KV cache dtype."""
    if model.attention == "mla":
        return model.kv_bytes_per_token
    heads = max(1, math.ceil(model.kv_heads / tensor_parallel))
    return 2 * model.layers * heads * model.head_dim * model.kv_element_bytes


@dataclass(frozen=True)
class GpuBudget:
    """One GPU of a replica: vLLM's KV budget after weights and the activation/non-torch reserve."""

    memory_gib: float  # visible to CUDA
    usable_gib: float  # x gpu_memory_utilization
    weights_gib: float  # this GPU's share of the weights (weights / TP)
    reserve_gib: float  # peak activations + CUDA graphs + NCCL (catalog GPU_RESERVE_GIB)
    kv_bytes_per_token: int  # this GPU's share of one token's KV
    block_tokens: int
    lora_gib: float = 0.0  # LoRA adapter slots (kvtier/sizing.py lora_gib_per_gpu)

    @property
    def kv_gib(self) -> float:
        """Negative when the weights (and adapter slots) do not fit."""
        return self.usable_gib - self.weights_gib - self.reserve_gib - self.lora_gib

    @property
    def tokens(self) -> int:
        """Tokens of KV a replica holds: whole vLLM blocks (every GPU of a replica holds the same tokens)."""
        if self.kv_gib <= 0:
            return 0
        blocks = int(self.kv_gib * GIB // (self.block_tokens * self.kv_bytes_per_token))
        return blocks * self.block_tokens


def gpu_budget(
    gpu: Gpu, utilization: float, model: Model, tensor_parallel: int, block_tokens: int, lora_gib: float = 0.0
) -> GpuBudget:
    return GpuBudget(
        memory_gib=gpu.memory_gib,
        usable_gib=gpu.memory_gib * utilization,
        weights_gib=model.weight_bytes / tensor_parallel / GIB,
        reserve_gib=GPU_RESERVE_GIB.value,
        kv_bytes_per_token=kv_bytes_per_token_per_gpu(model, tensor_parallel),
        block_tokens=block_tokens,
        lora_gib=lora_gib,
    )
