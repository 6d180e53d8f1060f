"""How fast each tier returns KV, and how fast a GPU recomputes it (docs/planning.md, "Speeds")."""

from __future__ import annotations

from dataclasses import dataclass

from kvtier.catalog import GB, SINGLE_FLOW_GBPS, Gpu, InstanceType, Model


@dataclass(frozen=True)
class Speeds:
    """Seconds per token of one replica: loading KV from L1 or L2, and recomputing it (linear and N^2 parts)."""

    l1_s_per_token: float
    l2_s_per_token: float
    l2_single_flow_s_per_token: float
    prefill_s_per_token: float
    prefill_s_per_token_squared: float
    l2_read_gbps: float
    l2_hit_fixed_s: float  # an L2 hit's cost beyond its bytes (catalog l2_hit_fixed_s)
    forward_floor_s: float  # one forward pass reads the GPU's share of the weights (issue 36)
    prefill_tflops: float  # effective: TP GPUs x dense peak (BF16, or FP8 for FP8 matmuls) x MFU


def matmul_tflops(model: Model, gpu: Gpu) -> float:
    """The dense peak a prefill's matmuls run at: the GPU's FP8 peak for an FP8 checkpoint on a GPU with FP8 tensor
    cores (L40S, H100), else its BF16 peak (A10G: weight-only FP8, matmuls in 16 bits). Issue 36."""
    if model.format_spec.fp8_matmul and gpu.fp8_dense_tflops:
        return gpu.fp8_dense_tflops
    return gpu.bf16_dense_tflops


def speeds(model: Model, instance: InstanceType, tensor_parallel: int) -> Speeds:
    gpu = instance.gpu_spec
    kv = model.kv_bytes_per_token
    # L1 -> GPU: every TP rank copies its own shard over its own PCIe link, in parallel.
    l1 = kv / tensor_parallel / (gpu.host_to_gpu_gbps * GB)
    # L2: the whole token's KV crosses the node's network (the ranks share one NIC): Curvine places chunks on
    # workers round-robin, never on the reader's own node with kvtier's manifests (docs/planning.md).
    l2_gbps = instance.l2_read_gbps or 0.0
    l2 = kv / (l2_gbps * GB) if l2_gbps > 0 else float("inf")
    single_flow = kv / (SINGLE_FLOW_GBPS.value / 8 * GB)
    mfu = instance.prefill_mfu or 0.0
    flops = tensor_parallel * matmul_tflops(model, gpu) * 1e12 * mfu
    return Speeds(
        l1_s_per_token=l1,
        l2_s_per_token=l2,
        l2_single_flow_s_per_token=single_flow,
        prefill_s_per_token=model.linear_flops_per_token / flops if flops else float("inf"),
        prefill_s_per_token_squared=model.attention_flops_coefficient / flops if flops else float("inf"),
        l2_read_gbps=l2_gbps,
        l2_hit_fixed_s=instance.l2_hit_fixed_s or 0.0,
        forward_floor_s=model.weight_bytes / tensor_parallel / (gpu.memory_gbps * GB) if gpu.memory_gbps else 0.0,
        prefill_tflops=flops / 1e12,
    )
