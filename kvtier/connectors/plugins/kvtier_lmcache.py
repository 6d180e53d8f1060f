"""kvtier's LMCache connector for vLLM: vLLM's `LMCacheConnectorV1`, with the request's cache tags set by kvtier.

LMCache 0.4.3 turns every `lmcache.tag.<name>` entry of a request's `kv_transfer_params` into part of the cache key
and of the L2 file name (`...@<dtype>@<name>%<value>.data`), at every path that builds keys: the scheduler's lookup,
the store and the load (docs/references.md "Request tags (issue 34)"). Before LMCache first reads a request (the
scheduler's connector lookup, which every new request passes through), this class:
1. drops the client's own `lmcache.tag.*` entries (a client could fork the shared L2 and fill the LOB's budget,
   docs/l2.md "Client-supplied cache tags");
2. sets kvtier's tags, one mechanism for every tag source (in this fixed order, as the key compares tags in order):
   - `lmcache.tag.kvtier_salt`: the request's `cache_salt` (vLLM keeps it in its own hash but LMCache ignores it),
     as an HMAC-SHA256 with the endpoint's key, so tenants who salt never share KV on L1 or L2;
   - `lmcache.tag.kvtier_adapter`: the request's LoRA adapter (`LoRARequest.lora_name` and `lora_path`; the path
     carries the adapter's pinned version), so no adapter reads KV computed with other weights. `lora_int_id` is
     left out: vLLM numbers adapters per server in load order, so it differs between replicas.
   A value is 32 hex digits: no `@`, `%` or `/` (the file name's separators), and no salt or adapter name in clear.
Nothing else changes (other `kv_transfer_params` entries, such as `lmcache.skip_save`, stay).

The endpoint's key is `KVTIER_TAG_KEY` in the engine's environment (kvtier renders it; docs/l2.md "The request-tag
key" says where it comes from and what that protects). Break switches, read here in the engine (tests set them in
the engine's environment): `KVTIER_SALT_BREAK` (no salt tag) and `KVTIER_ADAPTER_TAG_BREAK` (no adapter tag).

Shipped in the endpoint's LMCache ConfigMap and imported in the engine pod; the class is built on first access
(module `__getattr__`), so kvtier's own tests can import the module without vLLM. Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

CLASS_NAME = "KvtierLMCacheConnectorV1"
TAG_PREFIX = "lmcache.tag."
SALT_TAG = "lmcache.tag.kvtier_salt"
ADAPTER_TAG = "lmcache.tag.kvtier_adapter"
KEY_VAR = "KVTIER_TAG_KEY"
SALT_BREAK = "KVTIER_SALT_BREAK"
ADAPTER_BREAK = "KVTIER_ADAPTER_TAG_BREAK"
TAG_HEX_CHARS = 32  # 128 bits of HMAC-SHA256
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


def tag_value(key: bytes, kind: str, *parts: str) -> str:
    """HMAC-SHA256 of `kind` and `parts` under the endpoint's key, framed as a JSON list (so ("a", "bc") and
    ("ab", "c") never meet), as hex."""
    message = json.dumps([kind, *parts], ensure_ascii=True, separators=(",", ":")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:TAG_HEX_CHARS]


def salt_tag(key: bytes, cache_salt: str) -> str:
    return tag_value(key, "cache_salt", cache_salt)


def adapter_tag(key: bytes, lora_name: str, lora_path: str) -> str:
    return tag_value(key, "lora", lora_name, lora_path)


def request_tags(
    key: bytes, cache_salt: Any, lora_request: Any, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """kvtier's tags for one request, in key order: the salt's, then the adapter's. A salt that is not a non-empty
    string gets none (vLLM refuses such salts before the engine sees them)."""
    env = os.environ if env is None else env
    tags: dict[str, str] = {}
    if isinstance(cache_salt, str) and cache_salt and not env.get(SALT_BREAK):
        tags[SALT_TAG] = salt_tag(key, cache_salt)
    if lora_request is not None and not env.get(ADAPTER_BREAK):
        name = str(getattr(lora_request, "lora_name", ""))
        path = str(getattr(lora_request, "lora_path", "") or "")
        tags[ADAPTER_TAG] = adapter_tag(key, name, path)
    return tags


def apply_request_tags(request: Any, key: bytes, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Drop the client's tags from the request's `kv_transfer_params` and set kvtier's, where LMCache reads them
    (`sampling_params.extra_args["kv_transfer_params"]`); returns kvtier's tags. Idempotent: the scheduler may ask
    for a request more than once (a preempted one)."""
    sampling = getattr(request, "sampling_params", None)
    if sampling is None:  # a pooling request: LMCache reads no configs for it
        return {}
    strip_client_tags(sampling.extra_args)
    tags = request_tags(key, getattr(request, "cache_salt", None), getattr(request, "lora_request", None), env)
    if not tags:
        return tags
    if sampling.extra_args is None:
        sampling.extra_args = {}
    params = sampling.extra_args.get("kv_transfer_params")
    if not isinstance(params, dict):
        params = {}
        sampling.extra_args["kv_transfer_params"] = params
    params.update(tags)
    return tags


def tag_key(env: Mapping[str, str] | None = None) -> bytes:
    """The endpoint's key from the engine's environment; refuses to start without one (a pod kvtier did not
    render, or an old ConfigMap next to a new module)."""
    value = (os.environ if env is None else env).get(KEY_VAR, "")
    if not value:
        raise RuntimeError(f"{KEY_VAR} is not set: kvtier renders it into the engine's environment (docs/l2.md)")
    return value.encode()


def _connector_class() -> type:
    from importlib import import_module

    base: Any = import_module(BASE_MODULE).LMCacheConnectorV1

    class KvtierLMCacheConnectorV1(base):  # type: ignore[misc]  # vLLM is not installed where kvtier is typed
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._kvtier_tag_key = tag_key()
            super().__init__(*args, **kwargs)

        def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
            apply_request_tags(request, self._kvtier_tag_key)
            return super().get_num_new_matched_tokens(request, num_computed_tokens)

    return KvtierLMCacheConnectorV1


def __getattr__(name: str) -> type:
    if name == CLASS_NAME:
        cls = _connector_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
