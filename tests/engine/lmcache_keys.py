"""LMCache's own keys for one operator pod on HyperPod Tiered Storage: run by the engine venv's python with the
LMCache version kvtier assumes for the operator image first on PYTHONPATH (tiered_storage_keys.py), in a process whose
environment is the pod's worker env (PYTHONHASHSEED must be set before the interpreter starts).

Reads one JSON object on stdin: `args` (the worker's vLLM argv, `--model` first), `tokens`, `rank`, `kv_dtype`. Prints
one JSON object: the LMCache version, its NONE_HASH (the seed of every chunk hash), `hash(None)` (which LMCache's chunk
hash takes in: constant from CPython 3.12, the operator image's Python), the bucket and the daemon's path of every
chunk, as LMCache 0.3.9.post2 builds them:
- config: `LMCacheEngineConfig.from_env()` (what `lmcache_get_or_create_config` does without LMCACHE_CONFIG_FILE;
  the operator's own file, if any, is overridden by these variables: `update_config_from_env`);
- metadata: the fields `integration/vllm/utils.py::create_lmcache_metadata` takes from vLLM (`model_config.model`,
  world size, rank, "vllm", the KV dtype);
- keys: `ChunkedTokenDatabase.process_tokens` (`v1/token_database.py`), `CacheEngineKey.to_string` (`utils.py`);
- bucket and path: `SageMakerHyperPodConnectorAdapter.create_connector` reads `extra_config` (its connector class is
  replaced by a recorder: no daemon here), and the connector's `_key_to_string` quotes the key into
  `/v1/kv/{bucket}/{key}` (`sagemaker_hyperpod_connector.py`).
Standard library plus what the engine venv has (torch, vLLM); imports nothing from kvtier.
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib import metadata
from typing import Any


def flag(args: list[str], name: str, default: str) -> str:
    return args[args.index(name) + 1] if name in args else default


def main() -> None:
    request = json.load(sys.stdin)
    import torch
    from lmcache.config import LMCacheEngineMetadata
    from lmcache.v1 import token_database
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.storage_backend.connector import ConnectorContext
    from lmcache.v1.storage_backend.connector import sagemaker_hyperpod_connector as hyperpod
    from lmcache.v1.storage_backend.connector.sagemaker_hyperpod_adapter import SageMakerHyperPodConnectorAdapter

    args: list[str] = request["args"]
    config = LMCacheEngineConfig.from_env()
    tp = int(flag(args, "--tensor-parallel-size", "1"))
    kv_dtype = getattr(torch, request["kv_dtype"])
    shape = (1, 2, config.chunk_size, 1, 1)  # the memory pool's shape: not part of a key
    meta = LMCacheEngineMetadata(flag(args, "--model", ""), tp, int(request["rank"]), "vllm", kv_dtype, shape)
    database = token_database.ChunkedTokenDatabase(config, meta)

    recorded: dict[str, Any] = {}
    real = hyperpod.SageMakerHyperPodConnector

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            recorded.update(kwargs)

        def post_init(self) -> None:
            pass

    hyperpod.SageMakerHyperPodConnector = Recorder
    loop = asyncio.new_event_loop()
    try:
        context = ConnectorContext(config.remote_url, loop, None, config, meta)
        SageMakerHyperPodConnectorAdapter().create_connector(context)
    finally:
        hyperpod.SageMakerHyperPodConnector = real
        loop.close()
    bucket = recorded["bucket_name"]
    keys = [key for _, _, key in database.process_tokens(request["tokens"])]
    print(
        json.dumps(
            {
                "lmcache": metadata.version("lmcache"),
                "lmcache_file": token_database.__file__,
                "none_hash": int(token_database.NONE_HASH),
                "hash_of_none": hash(None),
                "hash_func": getattr(database.hash_func, "__name__", str(database.hash_func)),
                "chunk_size": config.chunk_size,
                "bucket": bucket,
                "url": recorded["sagemaker_hyperpod_url"],
                "keys": [key.to_string() for key in keys],
                "paths": [f"/v1/kv/{bucket}/{real._key_to_string(None, key)}" for key in keys],
            }
        )
    )


if __name__ == "__main__":
    main()
