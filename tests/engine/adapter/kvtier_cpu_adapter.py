"""Test-only: lets stock LMCache 0.4.3 move KV between vLLM-CPU's paged cache and its memory objects.

LMCache ships GPU, XPU and HPU connectors only; on vLLM's CPU platform `get_vllm_torch_dev` raises and LMCache falls
back to recompute-only, storing nothing. This module supplies the missing pieces, written from LMCache 0.4.3's
and vLLM 0.32's source (docs/references.md, "Real engines on CPU"):
- `CPUPagedConnector`: a `GPUConnectorInterface` that gathers and scatters with plain torch indexing. vLLM's CPU
  attention keeps one tensor per layer shaped [num_blocks, num_kv_heads, block_size, 2 * head_size], whose view
  [num_blocks, num_kv_heads, 2 * block_size, head_size] holds keys in the first block_size rows and values in the rest
  (`vllm/v1/attention/backends/cpu_attn.py`). LMCache's memory objects are KV_2LTD:
  [2, num_layers, num_tokens, num_kv_heads * head_size]. Slot s is block s // block_size, row s % block_size.
  MLA (issue 36): vLLM-CPU's MLA backend keeps one latent tensor per layer, [num_blocks, 1, block_size, kv_lora_rank +
  qk_rope_head_dim] (`vllm/v1/attention/backends/mla/cpu_mla.py`, written by `concat_and_cache_mla`), and LMCache's
  MLA memory objects are KV_MLA_FMT: [1, num_layers, num_tokens, latent] (`LMCacheMetadata.get_shapes`, kv_size 1
  with `use_mla`). The bytes are copied as they are, so any KV cache dtype (an FP8 cache is uint8 on both sides:
  vLLM's `STR_DTYPE_TO_TORCH_DTYPE`, LMCache's `create_lmcache_metadata`) moves unchanged.
- `get_vllm_torch_dev` on CPU: a device module stub (one device, no-op set_device).
- `KVLayerGroupInfo.hidden_dim_size` for those 4-D shapes (LMCache 0.4.3 knows only 5-D MHA and 3-D MLA shapes).
- MLA's first-rank broadcast (`LMCacheEngine._broadcast_or_receive_memory_objs`) skipped with one rank on CPU: it
  moves chunks through `cuda:` tensors, and one rank has no one to send them to.
Everything else (token hashing, chunking, L1, the fs:// backend, serde, file names) stays LMCache's own code.
Loaded only into the test's engine processes, by sitecustomize.py on their PYTHONPATH.
"""

from __future__ import annotations

import logging
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

logger = logging.getLogger("kvtier.test_adapter")
ACTIVE_LINE = "kvtier test adapter: CPU copy connector active"


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _slots(kwargs: dict[str, Any], start: int, end: int) -> torch.Tensor:
    if "slot_mapping" not in kwargs:
        raise ValueError("'slot_mapping' should be provided in kwargs")
    slots: torch.Tensor = kwargs["slot_mapping"][start:end]
    return slots.to(device="cpu", dtype=torch.long)


def _layer_views(kvcaches: list[torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
    """Each layer's cache as [blocks, heads, 2 * block_size, head_size], with its block size."""
    views = []
    for cache in kvcaches:
        if cache.dim() != 4 or cache.shape[3] % 2:
            raise ValueError(f"expected vLLM-CPU KV [blocks, heads, block_size, 2*head_size], got {tuple(cache.shape)}")
        blocks, heads, block_size, packed = cache.shape
        views.append((cache.view(blocks, heads, 2 * block_size, packed // 2), block_size))
    return views


def _latent_views(kvcaches: list[torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
    """MLA: each layer's latent cache as [blocks, block_size, latent], with its block size. vLLM-CPU 0.32 hands the
    connector [blocks, 1, block_size, latent] (the one KV head of MLAAttentionSpec)."""
    views = []
    for cache in kvcaches:
        latent = (
            cache.view(cache.shape[0], cache.shape[2], cache.shape[3])
            if cache.dim() == 4 and cache.shape[1] == 1
            else cache
        )
        if latent.dim() != 3:
            raise ValueError(f"expected vLLM-CPU MLA KV [blocks, 1, block_size, latent], got {tuple(cache.shape)}")
        views.append((latent, int(latent.shape[1])))
    return views


class CPUPagedConnector:
    """vLLM-CPU paged KV <-> LMCache KV_2LTD (or, for MLA, KV_MLA_FMT) memory objects, by index gather/scatter."""

    # LMCache stores MLA from the first rank only and, on retrieve, runs its rank broadcast inside
    # `torch.cuda.stream(gpu_connector.load_stream)` (lmcache/v1/cache_engine.py `save_only_first_rank`, L117-L122,
    # L830-L845): a None stream makes that a no-op on CPU, and every copy here is synchronous.
    load_stream = None

    def __init__(self, num_layers: int, hidden_dim_size: int, use_mla: bool = False) -> None:
        self.num_layers = num_layers
        self.hidden_dim_size = hidden_dim_size
        self.use_mla = use_mla
        self.kvcaches: list[torch.Tensor] | None = None

    @classmethod
    def from_metadata(cls, metadata: Any) -> CPUPagedConnector:
        num_layers, _, _, num_kv_heads, head_size = metadata.kv_shape
        return cls(num_layers, num_kv_heads * head_size, bool(metadata.use_mla))

    def initialize_kvcaches_ptr(self, **kwargs: Any) -> None:
        if "kvcaches" in kwargs:
            self.kvcaches = list(kwargs["kvcaches"])

    def _caches(self, kwargs: dict[str, Any]) -> list[tuple[torch.Tensor, int]]:
        return _layer_views(self._tensors(kwargs))

    def _latents(self, kwargs: dict[str, Any]) -> list[tuple[torch.Tensor, int]]:
        return _latent_views(self._tensors(kwargs))

    def _tensors(self, kwargs: dict[str, Any]) -> list[torch.Tensor]:
        self.initialize_kvcaches_ptr(**kwargs)
        if self.kvcaches is None:
            raise ValueError("kvcaches should be provided in kwargs or initialized beforehand")
        return self.kvcaches

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        """vLLM's cache -> memory object (a store)."""
        slots = _slots(kwargs, start, end)
        out = memory_obj.tensor  # [2, layers, tokens, hidden]; MLA: [1, layers, tokens, latent]
        if self.use_mla:
            for layer, (latent, block_size) in enumerate(self._latents(kwargs)):
                out[0, layer].copy_(latent[slots // block_size, slots % block_size, :])
            return
        for layer, (kv, block_size) in enumerate(self._caches(kwargs)):
            blocks, rows = slots // block_size, slots % block_size
            out[0, layer].copy_(kv[blocks, :, rows, :].reshape(len(slots), -1))
            out[1, layer].copy_(kv[blocks, :, rows + block_size, :].reshape(len(slots), -1))

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        """Memory object -> vLLM's cache (a retrieve); tokens vLLM already holds are left alone, as LMCache's CUDA
        connector does (`skip_prefix_n_tokens`), since their blocks may be shared with running requests."""
        skip = min(end - start, max(0, int(kwargs.get("vllm_cached_tokens", 0)) - start))
        slots = _slots(kwargs, start + skip, end)
        if len(slots) == 0:
            return
        data = memory_obj.tensor[:, :, skip:, :]
        if self.use_mla:
            for layer, (latent, block_size) in enumerate(self._latents(kwargs)):
                latent[slots // block_size, slots % block_size, :] = data[0, layer].to(latent.dtype)
            return
        for layer, (kv, block_size) in enumerate(self._caches(kwargs)):
            blocks, rows = slots // block_size, slots % block_size
            heads, head_size = kv.shape[1], kv.shape[3]
            kv[blocks, :, rows, :] = data[0, layer].reshape(len(slots), heads, head_size).to(kv.dtype)
            kv[blocks, :, rows + block_size, :] = data[1, layer].reshape(len(slots), heads, head_size).to(kv.dtype)

    def batched_from_gpu(self, memory_objs: Any, starts: list[int], ends: list[int], **kwargs: Any) -> None:
        for memory_obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(memory_obj, start, end, **kwargs)

    def batched_to_gpu(
        self, memory_objs: Any = None, starts: list[int] | None = None, ends: list[int] | None = None, **kwargs: Any
    ) -> None:
        for memory_obj, start, end in zip(memory_objs or [], starts or [], ends or [], strict=True):
            self.to_gpu(memory_obj, start, end, **kwargs)

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([1 if self.use_mla else 2, self.num_layers, num_tokens, self.hidden_dim_size])


def patch_connector_factory(module: ModuleType) -> None:
    """lmcache.v1.gpu_connector.CreateGPUConnector: our connector for vLLM on CPU, the original otherwise."""
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface

    GPUConnectorInterface.register(CPUPagedConnector)
    original = vars(module)["CreateGPUConnector"]

    def create(config: Any, metadata: Any, engine: Any, layout_hints: Any = None) -> Any:
        if engine == EngineType.VLLM and _on_cpu():
            if config.use_layerwise:
                raise RuntimeError("the kvtier CPU test adapter does not do layerwise transfer")
            logger.warning("%s (kv_shape %s)", ACTIVE_LINE, tuple(metadata.kv_shape))
            _ENGINE["use_mla"] = bool(metadata.use_mla)
            return CPUPagedConnector.from_metadata(metadata)
        return original(config, metadata, engine, layout_hints=layout_hints)

    vars(module)["CreateGPUConnector"] = create


def patch_torch_dev(module: ModuleType) -> None:
    """lmcache.integration.vllm.utils.get_vllm_torch_dev: a one-device stub on vLLM's CPU platform."""
    original = vars(module)["get_vllm_torch_dev"]
    cpu = SimpleNamespace(device_count=lambda: 1, set_device=lambda index: None)

    def get_vllm_torch_dev() -> tuple[Any, str]:
        if _on_cpu():
            return cpu, "cpu"
        return original()  # type: ignore[no-any-return]

    vars(module)["get_vllm_torch_dev"] = get_vllm_torch_dev


# What the engine's connector was created for (LMCache builds its layer groups afterwards, when vLLM registers the
# caches): a 4-D MLA cache [blocks, 1, block_size, latent] must not be read as K and V halves.
_ENGINE: dict[str, bool] = {"use_mla": False}


def patch_layer_groups(module: ModuleType) -> None:
    """lmcache.v1.kv_layer_groups.KVLayerGroupInfo.hidden_dim_size: also vLLM-CPU's 4-D per-layer shapes."""
    info = vars(module)["KVLayerGroupInfo"]
    original = info.hidden_dim_size

    def hidden_dim_size(self: Any) -> int:
        if len(self.shape) == 4 and _ENGINE["use_mla"]:  # [blocks, 1, block_size, latent]
            return int(self.shape[3])
        if len(self.shape) == 4:  # [blocks, kv_heads, block_size, 2 * head_size]
            return int(self.shape[1] * (self.shape[3] // 2))
        return int(original.fget(self))

    info.hidden_dim_size = property(hidden_dim_size)


def patch_first_rank_broadcast(module: ModuleType) -> None:
    """lmcache.v1.cache_engine.LMCacheEngine._broadcast_or_receive_memory_objs: nothing to do with one rank on CPU.

    LMCache stores MLA from the first rank only and, on retrieve, broadcasts the chunks to the other ranks through
    `cuda:<rank>` tensors (L1710-L1765, the device hard-coded): with one rank there is no one to send to, and on CPU
    the `.to("cuda:0")` fails. The chunks the first rank retrieved are then loaded as usual.
    """
    engine = vars(module)["LMCacheEngine"]
    original = engine._broadcast_or_receive_memory_objs

    def broadcast(self: Any, reordered_chunks: Any, ret_mask: Any) -> None:
        if _on_cpu() and self.metadata.world_size == 1:
            return
        original(self, reordered_chunks, ret_mask)

    engine._broadcast_or_receive_memory_objs = broadcast


PATCHES = {
    "lmcache.v1.gpu_connector": patch_connector_factory,
    "lmcache.integration.vllm.utils": patch_torch_dev,
    "lmcache.v1.kv_layer_groups": patch_layer_groups,
    "lmcache.v1.cache_engine": patch_first_rank_broadcast,
}
