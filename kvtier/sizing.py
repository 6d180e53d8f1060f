"""GPU, CPU and memory of one vLLM replica, from its instance type, tensor parallelism and L1 size; and what else
every GPU node must hold (Curvine, kvtier's L2 pods, DaemonSets) against its allocatable CPU and memory.

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

from kvtier.catalog import (
    DAEMONSET_CPU_MILLIS,
    DAEMONSET_MEMORY_MIB,
    DEFAULT_MAX_PODS,
    ENGINE_SCRATCH_GIB,
    ENI_MAX_PODS,
    NODE_MEMORY_VISIBLE,
    VLLM_HOST_BASE_GIB,
    VLLM_HOST_PER_RANK_GIB,
    WEIGHTS_DOWNLOAD_MARGIN,
    InstanceType,
    Model,
)
from kvtier.config.adapters import Adapter
from kvtier.config.curvine import CurvineConfig, cpu_millis, memory_bytes
from kvtier.config.endpoint import CacheConfig, Endpoint, S3Model
from kvtier.serving import l1_pinned_gib

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class WorkerSize:
    gpus: int
    cpu: int
    memory_gib: int

    def resources(self) -> dict[str, Any]:
        """Kubernetes `resources`, limits equal to requests: Guaranteed QoS (the pinned L1 is never overcommitted)."""
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


# ---- what else runs on every GPU node ------------------------------------------------------------------------------

Resources = dict[str, dict[str, str]]

# The Curvine CSI node plugin and its sidecars (registrar, livenessprobe), and the controller's.
CSI_PLUGIN_RESOURCES: Resources = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
CSI_SIDECAR_RESOURCES: Resources = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
# kvtier's L2 healer (one per GPU node) and each LOB's janitor (one per LOB, on some GPU node): small Python loops.
HEALER_RESOURCES: Resources = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "50m", "memory": "64Mi"},
}
# A janitor requests little CPU and has no CPU limit: the kernel shares a busy node's CPU by request (cgroup weight),
# so fifty janitors take 0.5 CPU from vLLM at most and use idle CPU for their passes (docs/l2.md "Janitors and the
# GPU nodes' budget"); memory keeps its limit: a pass over 1,000,000 files peaks at about 360 MiB (docs/benchmarks.md).
JANITOR_RESOURCES: Resources = {"requests": {"cpu": "10m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}}
JANITOR_INTERVAL_SECONDS = 30  # issue 11: every 30-60 s; the overshoot bound in docs/l2.md scales with it
JANITOR_TARGET_FRACTION = 0.9  # an over-budget pass deletes down to this share of the budget (chart and simulator)

# The EKS AMI's kubelet reservation (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go): kube-reserved CPU is
# 6% of the first core, 1% of the second, 0.5% of the third and fourth, 0.25% of the rest; kube-reserved memory is
# 11 MiB per pod the node may run plus 255 MiB; evictionHard memory.available is 100Mi.
_CPU_RESERVE_STEPS = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25))  # millicores, 1/10000
EVICTION_HARD_MIB = 100
MIB = 1024**2


def kube_reserved_cpu_millis(vcpus: int) -> int:
    total = vcpus * 1000
    reserved = 0
    for start, end, per_10000 in _CPU_RESERVE_STEPS:
        if total > start:
            reserved += (min(total, end if end is not None else total) - start) * per_10000 // 10000
    return reserved


def kube_reserved_memory_mib(max_pods: int) -> int:
    return 11 * max_pods + 255


@dataclass(frozen=True)
class Share:
    """Requests of one pod (or a group of pods) on a node."""

    name: str
    cpu_millis: int
    memory_bytes: int


def share(name: str, *containers: Resources) -> Share:
    return Share(
        name,
        sum(cpu_millis(c["requests"]["cpu"]) for c in containers),
        sum(memory_bytes(c["requests"]["memory"]) for c in containers),
    )


@dataclass(frozen=True)
class Allocatable:
    """What the scheduler and the kubelet may hand out on one node: capacity minus kube-reserved and eviction."""

    cpu_millis: int
    memory_bytes: int
    reserved_cpu_millis: int
    reserved_memory_bytes: int
    max_pods: int


def allocatable(instance: InstanceType) -> Allocatable:
    max_pods = ENI_MAX_PODS.get(instance.name, DEFAULT_MAX_PODS)
    reserved_cpu = kube_reserved_cpu_millis(instance.vcpus)
    reserved_memory = (kube_reserved_memory_mib(max_pods) + EVICTION_HARD_MIB) * MIB
    capacity_memory = int(instance.memory_gib * NODE_MEMORY_VISIBLE.value * 1024**3)
    return Allocatable(
        cpu_millis=instance.vcpus * 1000 - reserved_cpu,
        memory_bytes=capacity_memory - reserved_memory,
        reserved_cpu_millis=reserved_cpu,
        reserved_memory_bytes=reserved_memory,
        max_pods=max_pods,
    )


def curvine_node_shares(curvine: CurvineConfig, *, fuse: bool) -> list[Share]:
    """What kvtier's L2 takes on every GPU node: the worker, the FUSE pod (where L2 pods run; the CSI node plugin
    creates it with nodeName set, so only this sum keeps room for it), the CSI node plugin and the healer."""
    res = curvine.resources
    shares = [share("Curvine worker", res.worker.k8s())]
    if fuse:
        shares.append(share("FUSE", res.fuse.k8s()))
    shares.append(share("CSI node", CSI_PLUGIN_RESOURCES, CSI_SIDECAR_RESOURCES, CSI_SIDECAR_RESOURCES))
    shares.append(share("L2 healer", HEALER_RESOURCES))
    return shares


def daemonset_share() -> Share:
    return Share("other DaemonSets", int(DAEMONSET_CPU_MILLIS.value), int(DAEMONSET_MEMORY_MIB.value) * MIB)


# ---- LoRA adapters (issue 35) -------------------------------------------------------------------------------------


def _lora_elements(model: Model, rank: int) -> float:
    """Elements of one LoRA adapter of `rank` on every linear layer of every decoder layer: an A (rank x in) and a B
    (out x rank) matrix each. A Llama-style layer's linear layers sum to 9h + 2kv + 3i inputs plus outputs (q, k, v,
    o, gate, up, down; h hidden, kv the KV width, i the MLP width). The catalog has no MLP width, so i is what the
    parameters left after attention give with no embeddings: an upper bound."""
    hidden = model.attention_heads * model.head_dim
    kv = model.kv_heads * model.head_dim
    per_layer = model.params / model.layers
    mlp = max(hidden, (per_layer - 2 * hidden * hidden - 2 * hidden * kv) / (3 * hidden))
    dims = 9 * hidden + 2 * kv + 3 * mlp
    return model.layers * rank * dims


def lora_gib_per_gpu(endpoint: Endpoint, model: Model) -> float:
    """GPU memory vLLM reserves for LoRA adapters on one GPU of a replica: `max_loras` slots of rank `max_lora_rank`
    (vLLM preallocates them when `--enable-lora` is set: docs/references.md "LoRA adapters (issue 35)"), split over
    the tensor-parallel ranks. 0 without adapters."""
    if not endpoint.adapters:
        return 0.0
    limits = endpoint.lora
    elements = limits.max_loras * _lora_elements(model, limits.max_lora_rank)
    return elements * model.dtype_bytes / endpoint.tensor_parallel / (1024**3)


# ---- disk of an engine pod (issue 38) ------------------------------------------------------------------------------

ADAPTER_FILE_BYTES = 4  # per element: PEFT saves adapters in float32 unless told otherwise (the largest case)
MIN_VOLUME_GIB = 1  # config and tokenizer files, the adapters' configs: no volume is smaller


@dataclass(frozen=True)
class EngineDisk:
    """What an engine pod writes to its node's disk, GiB: the model download volume (`model-cache`), the adapters'
    volume (0 without adapters) and the container's own scratch. The pod's ephemeral-storage request and limit is
    their sum, and each volume's sizeLimit its share."""

    model_cache_gib: int
    adapters_gib: int
    scratch_gib: int
    why: str

    @property
    def total_gib(self) -> int:
        return self.model_cache_gib + self.adapters_gib + self.scratch_gib

    def quantity(self, gib: int) -> str:
        return f"{gib}Gi"


def adapter_gib(model: Model, adapter: Adapter) -> float:
    """The largest an adapter of the endpoint's model at its rank can be on disk (every linear layer, float32)."""
    return _lora_elements(model, adapter.rank) * ADAPTER_FILE_BYTES / (1024**3)


def engine_disk(endpoint: Endpoint, model: Model) -> EngineDisk:
    """Sized from the model: Hugging Face weights are downloaded (the weights plus WEIGHTS_DOWNLOAD_MARGIN); S3
    weights are streamed to the GPU by Run:ai's loader, so only their config and tokenizer land on disk."""
    weights_gib = model.weight_bytes / (1024**3)
    downloads = not isinstance(endpoint.model, S3Model)
    cache = math.ceil(weights_gib * (1 + WEIGHTS_DOWNLOAD_MARGIN.value)) + MIN_VOLUME_GIB if downloads else 0
    cache = max(cache, MIN_VOLUME_GIB)
    adapters = 0
    if endpoint.adapters:
        raw = sum(adapter_gib(model, a) for a in endpoint.adapters)
        adapters = math.ceil(raw * (1 + WEIGHTS_DOWNLOAD_MARGIN.value)) + MIN_VOLUME_GIB
    scratch = math.ceil(ENGINE_SCRATCH_GIB.value)
    source = f"weights {weights_gib:.1f} GiB downloaded" if downloads else "weights streamed from S3"
    why = f"{source}, model-cache {cache}Gi, adapters {adapters}Gi, scratch {scratch}Gi"
    return EngineDisk(cache, adapters, scratch, why)
