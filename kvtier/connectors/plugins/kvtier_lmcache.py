"""kvtier's LMCache connector for vLLM: vLLM's `LMCacheConnectorV1`, minus client-supplied cache tags.

LMCache 0.4.3 turns every `lmcache.tag.<name>` entry of a request's `kv_transfer_params` into part of the cache key
and of the L2 file name, so any client could fork the shared L2 and fill the LOB's budget with files no one else
reads (docs/l2.md "Client-supplied cache tags"). vLLM loads this class by `kv_connector_module_path`; before LMCache
first reads a request (the scheduler's connector lookup, which every new request passes through) the tags are
dropped, so tagged and untagged requests share keys. Nothing else changes.
Sources: docs/references.md "Client-supplied cache tags (issue 24)".

Shipped in the endpoint's LMCache ConfigMap and imported in the engine pod; the class is built on first access
(module `__getattr__`), so kvtier's own tests can import the module without vLLM.
"""

from __future__ import annotations

from typing import Any

CLASS_NAME = "KvtierLMCacheConnectorV1"
TAG_PREFIX = "lmcache.tag."
BASE_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector"


def strip_client_tags(extra_args: dict[str, Any] | None) -> list[str]:
    """Delete the `lmcache.tag.*` keys of `extra_args["kv_transfer_params"]` in place (vLLM's `Request` holds the
    same dict as its `kv_transfer_params`); returns the keys deleted."""
    params = (extra_args or {}).get("kv_transfer_params")
    if not isinstance(params, dict):
        return []
    tags = [key for key in params if isinstance(key, str) and key.startswith(TAG_PREFIX)]
    for key in tags:
        del params[key]
    return tags


def _connector_class() -> type:
    from importlib import import_module

    base: Any = import_module(BASE_MODULE).LMCacheConnectorV1

    class KvtierLMCacheConnectorV1(base):  # type: ignore[misc]  # vLLM is not installed where kvtier is typed
        def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
            strip_client_tags(getattr(request.sampling_params, "extra_args", None))
            return super().get_num_new_matched_tokens(request, num_computed_tokens)

    return KvtierLMCacheConnectorV1


def __getattr__(name: str) -> type:
    if name == CLASS_NAME:
        cls = _connector_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
