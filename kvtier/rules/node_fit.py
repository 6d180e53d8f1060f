"""Node fit: on every GPU instance type, the requests of its fullest packing of vLLM pods plus what kvtier's L2 and the
cluster's DaemonSets put on every GPU node must fit the node's allocatable CPU and memory.

The Curvine CSI driver creates each node's FUSE pod with `nodeName` already set (curvine-csi
pkg/csi/standalone_manager.go), so no scheduler keeps room for it: if the node is full, the kubelet rejects it
(OutOfcpu / OutOfmemory) and every L2 pod of the node hangs in ContainerCreating. This sum is what keeps the room.
The numbers and their sources: docs/references.md "Curvine on GPU nodes (issue 11)".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings
from kvtier.sizing import (
    JANITOR_RESOURCES,
    Allocatable,
    Share,
    allocatable,
    curvine_node_shares,
    daemonset_share,
    share,
    worker_size,
)

GIB = 1024**3


@dataclass(frozen=True)
class EnginePod:
    label: str  # <lob>/<endpoint>
    gpus: int
    cpu_millis: int
    memory_bytes: int


def fullest(gpus: int, pods: Sequence[tuple[EnginePod, int]], key: Callable[[EnginePod], int]) -> list[EnginePod]:
    """The engine pods (each at most its replica count) that fit `gpus` GPUs and request the most of `key`."""
    best: list[tuple[int, list[EnginePod]]] = [(0, [])] * (gpus + 1)
    for pod, count in pods:
        for _ in range(min(count, gpus // pod.gpus)):
            nxt = list(best)
            for used in range(gpus - pod.gpus + 1):
                total, chosen = best[used]
                if total + key(pod) > nxt[used + pod.gpus][0]:
                    nxt[used + pod.gpus] = (total + key(pod), [*chosen, pod])
            best = nxt
    return max(best, key=lambda item: item[0])[1]


def _cpu(millis: int) -> str:
    return f"{millis / 1000:g}"


def _gib(value: int) -> str:
    return f"{value / GIB:.3g}"


def _engines(pods: list[EnginePod]) -> Share:
    counts: dict[str, int] = {}
    for pod in pods:
        counts[pod.label] = counts.get(pod.label, 0) + 1
    who = ", ".join(f"{n} x {label}" for label, n in sorted(counts.items())) or "none"
    return Share(f"vLLM ({who})", sum(p.cpu_millis for p in pods), sum(p.memory_bytes for p in pods))


def check_node_requests(ctx: Context, found: Findings) -> None:
    env = ctx.env
    # Every LOB stack runs one janitor on some GPU node; the worst case puts all of them on one node.
    janitors = [share(f"L2 janitors x{len(ctx.lobs)}", *([JANITOR_RESOURCES] * len(ctx.lobs)))]
    node_shares = [*curvine_node_shares(env.curvine, fuse=bool(ctx.lobs)), *janitors, daemonset_share()]
    seen: set[str] = set()
    for group in env.groups("gpu"):
        if group.instance_type in seen:
            continue
        seen.add(group.instance_type)
        instance = env.instance(group.instance_type)
        pods: list[tuple[EnginePod, int]] = []
        for site in ctx.sites():
            e = site.endpoint
            if e.instance_type != instance.name or e.tensor_parallel > instance.gpus:
                continue
            size = worker_size(instance, e.tensor_parallel, e.cache)
            pod = EnginePod(site.label, size.gpus, size.cpu * 1000, size.memory_gib * GIB)
            pods.append((pod, e.max_replicas))
        by_cpu = [_engines(fullest(instance.gpus, pods, lambda p: p.cpu_millis)), *node_shares]
        by_memory = [_engines(fullest(instance.gpus, pods, lambda p: p.memory_bytes)), *node_shares]
        cpu = sum(s.cpu_millis for s in by_cpu)
        memory = sum(s.memory_bytes for s in by_memory)
        node = allocatable(instance)
        if cpu <= node.cpu_millis and memory <= node.memory_bytes:
            continue
        found.errors.append(
            Problem(
                ctx.env_file,
                f"{ctx.group_path(group)}.instance_type",
                _message(instance.name, instance.vcpus, instance.memory_gib, node, cpu, memory, by_cpu, by_memory),
                f"use a GPU instance type with more vCPUs and memory for this group (ml.g6e.4xlarge or larger), or "
                f"lower curvine.resources.worker / curvine.resources.fuse in {ctx.env_file}",
            )
        )


def _message(
    name: str,
    vcpus: int,
    memory_gib: float,
    node: Allocatable,
    cpu: int,
    memory: int,
    by_cpu: list[Share],
    by_memory: list[Share],
) -> str:
    over = [what for what, bad in (("CPU", cpu > node.cpu_millis), ("memory", memory > node.memory_bytes)) if bad]
    cpu_parts = ", ".join(f"{s.name} {_cpu(s.cpu_millis)}" for s in by_cpu)
    memory_parts = ", ".join(f"{s.name} {_gib(s.memory_bytes)}" for s in by_memory)
    return (
        f"a {name} node can allocate {_cpu(node.cpu_millis)} CPU ({vcpus} vCPU - {_cpu(node.reserved_cpu_millis)} "
        f"kube-reserved) and {_gib(node.memory_bytes)} GiB ({memory_gib:g} GiB nominal, less the kernel's share, "
        f"kube-reserved for {node.max_pods} pods and the eviction threshold), but its fullest packing requests "
        f"{_cpu(cpu)} CPU ({cpu_parts}) and {_gib(memory)} GiB ({memory_parts}): not enough {' and '.join(over)}, "
        "so the kubelet rejects the FUSE pod the CSI driver binds to the node and L2 pods hang in ContainerCreating"
    )
