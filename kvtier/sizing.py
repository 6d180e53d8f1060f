"""GPU, CPU and memory of one vLLM replica, from its instance type, tensor parallelism and L1 size.

Per tensor-parallel rank: one GPU, half the vCPUs that come with a GPU, and a quarter of the host memory that comes
with a GPU, raised to hold what the planner counts as pinned (LMCache's L1 of the whole replica, all ranks together,
plus the vLLM processes, kvtier/planner/host.py), so requests and the node-RAM check agree. On `ml.g6e.4xlarge` with
TP 1 and a 20 GB L1 this is the reference deployment's request: cpu 8, memory 32Gi, 1 GPU (reference aws-hyperpod.md
5, step 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvtier.catalog import VLLM_HOST_BASE_GIB, VLLM_HOST_PER_RANK_GIB, InstanceType
from kvtier.config.endpoint import CacheConfig
from kvtier.serving import l1_pinned_gib

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class WorkerSize:
    gpus: int
    cpu: int
    memory_gib: int

    def resources(self) -> dict[str, Any]:
        """Kubernetes `resources`, limits equal to requests: Guaranteed QoS (the pinned L1 is never overcommitted), and
        the LOB quota's `limits.cpu` is met without the LimitRange's small default CPU limit."""
        values = {"cpu": str(self.cpu), "memory": f"{self.memory_gib}Gi", GPU_RESOURCE: str(self.gpus)}
        return {"requests": dict(values), "limits": dict(values)}


def worker_size(instance: InstanceType, tensor_parallel: int, cache: CacheConfig) -> WorkerSize:
    if instance.gpus < 1:
        raise ValueError(f"{instance.name} has no GPU")
    vcpus_per_gpu = instance.vcpus // instance.gpus
    memory_per_gpu_gib = instance.memory_gib / instance.gpus
    cpu = tensor_parallel * max(1, vcpus_per_gpu // 2)
    share = tensor_parallel * math.floor(memory_per_gpu_gib / 4)
    vllm_gib = VLLM_HOST_BASE_GIB.value + VLLM_HOST_PER_RANK_GIB.value * tensor_parallel
    needed = math.ceil(l1_pinned_gib(cache) + vllm_gib)
    return WorkerSize(gpus=tensor_parallel, cpu=cpu, memory_gib=max(share, needed))
