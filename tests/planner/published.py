"""The published measurements kvtier's TTFT model is held to, each with its public source, in one table.

Read by tests/planner/test_l2_calibration.py; docs/planning.md ("Calibration against the blog") shows the model next
to every point. The blog is the AWS Machine Learning Blog post below (reposted unchanged in
CurvineIO/curvine-doc@984dd4d2:blog/2026-08-13-tiered-kv-cache-sagemaker-hyperpod-curvine/index.md).
"""

from __future__ import annotations

from dataclasses import dataclass

BLOG = (
    "https://aws.amazon.com/cn/blogs/machine-learning/"
    "tiered-kv-cache-for-large-llms-on-amazon-sagemaker-hyperpod-with-curvine/"
)
BASETEN_A10G = "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/"
NVIDIA_L4 = "https://www.nvidia.com/en-us/data-center/l4/"
NVIDIA_L40S = "https://www.nvidia.com/en-us/data-center/l40s/"
KARPENTER_BANDWIDTH = "aws/karpenter-provider-aws@01a436f0:pkg/providers/instancetype/zz_generated.bandwidth.go"


@dataclass(frozen=True)
class Setup:
    """What the blog's benchmarks ran (section "Benchmarking", unless noted)."""

    model: str = "Qwen/Qwen2-7B-Instruct"  # fp16, tensor parallelism 1
    chunk_tokens: int = 256  # "LMCache's default 256-token chunk size"
    output_tokens: int = 5  # "Generation is capped at five tokens": 4 decode steps after the first token
    # "Stored 1925 out of total 1925 tokens" (the cross-node read log): the partial last chunk was stored, so the
    # blog's connector ran with save_unfull_chunk true (kvtier renders false).
    save_unfull_chunk: bool = True
    source: str = BLOG


@dataclass(frozen=True)
class Sweep:
    """Single-shot prompts, Pod A (cold) writes L2, Pod B on the other node reads; two ml.g5.4xlarge (A10G)."""

    speedup: tuple[tuple[int, float], ...] = ((500, 0.99), (1000, 1.7), (2500, 2.7), (3000, 2.2))
    cold_2500_s: float = 0.774  # "a cold 774 ms request completed in 287 ms"
    hit_2500_s: float = 0.287
    saved_3000_s: float = 0.49  # "490 ms saved per request at 3,000 tokens"
    instance_type: str = "ml.g5.4xlarge"
    source: str = BLOG


@dataclass(frozen=True)
class MultiTurn:
    """Four turns of accumulating history, 530 to 2,114 prompt tokens, sent to Pod A, then replayed on Pod B.

    Figure 4's caption: "Pod A writes / Pod B reads, ml.g6e.4xlarge / ml.g6.16xlarge". The blog gives the first and
    last turn's lengths only; the middle two are assumed evenly spaced.
    """

    turns: tuple[int, ...] = (530, 1058, 1586, 2114)
    first_pass_s: float = 4.21
    replay_s: float = 3.25
    speedup: float = 1.30
    first_turn_speedup: float = 1.22
    last_turn_speedup: float = 1.34
    writer_instance_type: str = "ml.g6e.4xlarge"  # L40S
    reader_instance_type: str = "ml.g6.16xlarge"  # L4
    source: str = BLOG


@dataclass(frozen=True)
class Read:
    """The cross-node read log: "Retrieved 1925 out of 1925 required tokens. cost 55.75 ms" on two G6e nodes."""

    tokens: int = 1925
    seconds: float = 0.05575
    instance_type: str = "ml.g6e.4xlarge"
    source: str = BLOG


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gbps: float  # decimal GB/s of GPU memory: a decode step reads every weight once
    bf16_dense_tflops: float
    source: str


GPUS = {
    "A10G": Gpu("A10G", 600.0, 70.0, BASETEN_A10G + " (24 GB GDDR6, 600 GB/s, shared with the A10)"),
    "L40S": Gpu("L40S", 864.0, 362.05, NVIDIA_L40S + " (48 GB GDDR6, 864 GB/s)"),
    "L4": Gpu("L4", 300.0, 121.0, NVIDIA_L4 + " (24 GB GDDR6, 300 GB/s; 242 TFLOPS FP16 with sparsity, half dense)"),
}
# ml.g5.4xlarge bursts to 25 Gbps ("up to 25", baseline 10: KARPENTER_BANDWIDTH); a serial benchmark's read of
# 0.1-0.2 s is a burst. ml.g6.16xlarge: 25 Gbps baseline (same file).
BURST_GBPS = {"ml.g5.4xlarge": 25.0, "ml.g6.16xlarge": 25.0}

SETUP = Setup()
SWEEP = Sweep()
MULTI_TURN = MultiTurn()
READ = Read()
