"""Host RAM of a GPU node: what is pinned or reserved there in the worst packing of pods (docs/planning.md, "Host RAM of a GPU node")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtier.catalog import SYSTEM_RESERVE_GIB, VLLM_HOST_BASE_GIB, VLLM_HOST_PER_RANK_GIB
from kvtier.config.endpoint import Endpoint
from kvtier.serving import l1_pinned_gib  # what the charts tell LMCache to pin (a light module: no cdk8s)


@dataclass(frozen=True)
class PodMemory:
    """Host RAM one vLLM pod pins: LMCache's L1 (pinned at start) and its vLLM processes."""

    lob: str
    endpoint: str
    gpus: int
    l1_gib: float
    vllm_gib: float

    @property
    def total_gib(self) -> float:
        return self.l1_gib + self.vllm_gib


def pod_memory(lob: str, endpoint: Endpoint) -> PodMemory:
    tp = endpoint.tensor_parallel
    return PodMemory(
        lob=lob,
        endpoint=endpoint.name,
        gpus=tp,
        l1_gib=l1_pinned_gib(endpoint.cache),  # the replica's, over all its ranks
        vllm_gib=VLLM_HOST_BASE_GIB.value + VLLM_HOST_PER_RANK_GIB.value * tp,
    )


def worst_packing(gpus: int, candidates: Sequence[tuple[PodMemory, int]]) -> tuple[PodMemory, ...]:
    """The pods (each at most its count) that fit `gpus` GPUs and pin the most RAM: a bounded knapsack on GPUs."""
    best: list[tuple[float, tuple[PodMemory, ...]]] = [(0.0, ())] * (gpus + 1)
    for pod, count in candidates:
        # One more copy of this pod at a time, considered on top of every smaller packing.
        for _ in range(min(count, gpus // pod.gpus)):
            nxt = list(best)
            for used in range(gpus - pod.gpus + 1):
                ram, pods = best[used]
                if ram + pod.total_gib > nxt[used + pod.gpus][0]:
                    nxt[used + pod.gpus] = (ram + pod.total_gib, (*pods, pod))
            best = nxt
    return max(best, key=lambda item: item[0])[1]


@dataclass(frozen=True)
class NodeMemory:
    """Everything pinned or reserved on one GPU node, in GiB."""

    instance_type: str
    ram_gib: float
    tiered_storage_gib: float  # HyperPod's memory daemon (memory_percent of RAM), not LMCache
    system_gib: float
    curvine_gib: float  # worker + FUSE client
    pods: tuple[PodMemory, ...]

    @property
    def pinned_gib(self) -> float:
        return self.tiered_storage_gib + self.system_gib + self.curvine_gib + sum(p.total_gib for p in self.pods)

    @property
    def free_gib(self) -> float:
        return self.ram_gib - self.pinned_gib

    def breakdown(self) -> str:
        parts = [f"Tiered Storage {self.tiered_storage_gib:.1f}"] if self.tiered_storage_gib else []
        parts += [f"system {self.system_gib:.1f}", f"Curvine worker and FUSE {self.curvine_gib:.1f}"]
        for pod in self.pods:
            parts.append(f"{pod.lob}/{pod.endpoint} L1 {pod.l1_gib:.1f} + vLLM {pod.vllm_gib:.1f}")
        return " + ".join(parts) + " GiB"


def node_memory(
    instance_type: str,
    ram_gib: float,
    tiered_storage_percent: int | None,
    pods: tuple[PodMemory, ...],
    *,
    curvine_gib: float,
) -> NodeMemory:
    """`curvine_gib`: the Curvine worker and FUSE client of the node (the config's memory limits)."""
    return NodeMemory(
        instance_type=instance_type,
        ram_gib=ram_gib,
        tiered_storage_gib=ram_gib * (tiered_storage_percent or 0) / 100,
        system_gib=SYSTEM_RESERVE_GIB.value,
        curvine_gib=curvine_gib,
        pods=pods,
    )
