"""One L2 read measurement inside the engine venv (LMCache 0.4.3 and vLLM 0.32.0 installed): how fast the
connectors' own storage code moves chunk files into their memory, against a plain reader of the same files.
`python -m tools.benchl2` runs it once per connector, chunk size and mount, and writes the table; run by hand:

    .venv-engine/bin/python tools/l2read.py SPEC.json        # prints one JSON result line

SPEC: {"connector": "lmcache" | "vllm", "dir": folder on the mount, "file_bytes": KV bytes per file,
"files": files in all, "per_hit": files one L2 hit reads, "repeat": passes, "evict": drop the files' pages first,
"lmcache": LMCache's settings (file form, kvtier's rendering), "kv_shape": [layers, 2, tokens, kv heads, head size],
"threads": vLLM fs tier read threads}.

- lmcache: LMCache's own StorageManager with kvtier's settings (`fs://` RemoteBackend, its LocalCPUBackend as the
  buffer): files written by its fs connector (`put`), then each hit is what LMCache's retrieve does on a worker:
  `get_block_mapping` (the lookup: one existence check a chunk) and `batched_get` from the RemoteBackend (open, the
  28-byte header, the data into a memory object, per chunk, on its asyncio loop's thread pool). On CPU that ends in
  host memory; on a GPU the copy to the GPU follows, which is not measured here.
- vllm: the fs tier's own `batch_store_block` writes the files and its `batch_load_block` (the C extension when
  built) reads each hit into a buffer the size of the CPU tier's blocks, one job a hit on the tier's
  `DualQueueThreadPool` (vllm/v1/kv_offload/tiering/fs/manager.py `submit_load`), O_DIRECT where the mount takes it
  (`probe_o_direct`), as the tier decides.
- plain: each file opened, read whole into a buffer (`readinto`) and closed, one after another (what `cat` does).
Before every pass of either reader the files' cached pages are dropped (`posix_fadvise(DONTNEED)`) when "evict" is
set, so a disk is read from the disk; tmpfs has no other copy (its pages are the files).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

CHUNK = 1 << 20  # the plain reader's buffer when a file is larger


def evict(paths: list[Path]) -> None:
    """Drop the files' cached pages. Dirty pages (a file just written) are not dropped, only queued for writeback, so
    each file is flushed first: without that, most of a file written a moment before stays cached and the next read
    comes from memory (docs/references.md "Issue 40")."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(paths: list[Path], size: int) -> tuple[int, float]:
    """Bytes read and seconds: every file read whole, in order, into one buffer."""
    buffer = memoryview(bytearray(size))
    done = 0
    started = time.perf_counter()
    for path in paths:
        with path.open("rb", buffering=0) as handle:
            while True:
                count = handle.readinto(buffer)
                if not count:
                    break
                done += count
    return done, time.perf_counter() - started


def best(runs: list[tuple[int, float]]) -> dict[str, Any]:
    """The fastest pass's bytes per second (on a shared machine the pass least slowed by other work, as `timeit`
    takes the fastest), the median pass's, and all of them."""
    rates = sorted(done / seconds for done, seconds in runs)
    return {"rate": rates[-1], "median": rates[len(rates) // 2], "rates": rates, "bytes": runs[0][0]}


def plain_pass(paths: list[Path], size: int, *, drop: bool) -> tuple[int, float]:
    """One pass of the plain reader, after dropping the files' cached pages when asked."""
    if drop:
        evict(paths)
    return plain_read(paths, size)


def result(runs: list[tuple[int, float]], plain: list[tuple[int, float]], **extra: Any) -> dict[str, Any]:
    """A point's JSON: both readers' rates, their ratio and what else the connector's reader measured."""
    return {"connector": best(runs), "plain": best(plain), "ratio": paired(runs, plain), **extra}


def paired(runs: list[tuple[int, float]], plain: list[tuple[int, float]]) -> float:
    """The connector's fastest pass over the plain reader's fastest (the passes are interleaved, so both had the
    same chances of a quiet moment)."""
    return float(best(runs)["rate"] / best(plain)["rate"])


def lmcache(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from lmcache.utils import CacheEngineKey

    folder = Path(spec["dir"])
    manager = lmcache_manager(spec, folder)
    try:
        remote = next(name for name in manager.storage_backends if name != "LocalCPUBackend")
        keys = [CacheEngineKey("kvtier-bench", 1, 0, index, torch.bfloat16) for index in range(spec["files"])]
        hits = [keys[start : start + spec["per_hit"]] for start in range(0, len(keys), spec["per_hit"])]
        write_chunks(manager, remote, hits, spec["kv_shape"])
        paths = sorted(folder.glob("*.data"))
        if len(paths) != len(keys):
            raise RuntimeError(f"LMCache wrote {len(paths)} of {len(keys)} files into {folder}")
        runs, plain, lookups = [], [], []
        largest = max(path.stat().st_size for path in paths)
        for _ in range(spec["repeat"]):  # interleaved, so a change in the machine's load hits both alike
            manager.storage_backends["LocalCPUBackend"].clear()  # the hit must come from L2, not the write-back
            if spec["evict"]:
                evict(paths)
            started = time.perf_counter()
            done, looking = read_hits(manager, remote, hits, spec["kv_shape"][2])
            runs.append((done, time.perf_counter() - started))
            lookups.append(looking)
            plain.append(plain_pass(paths, largest, drop=spec["evict"]))
        shares = sorted(look / run[1] for look, run in zip(lookups, runs, strict=True))
        return result(runs, plain, lookup_share=shares[len(shares) // 2], file_bytes=paths[0].stat().st_size)
    finally:
        manager.close()


def lmcache_manager(spec: dict[str, Any], folder: Path) -> Any:
    """LMCache's StorageManager with the spec's settings (kvtier's rendering) and an `fs://` URL to `folder`."""
    import torch
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.event_manager import EventManager
    from lmcache.v1.metadata import LMCacheMetadata
    from lmcache.v1.storage_backend.storage_manager import StorageManager

    settings = dict(spec["lmcache"]) | {"remote_url": f"fs://localhost:0{folder}/"}
    config_file = folder.parent / f"{folder.name}-lmcache.yaml"
    config_file.write_text(json.dumps(settings), encoding="utf-8")  # JSON is YAML
    config = LMCacheEngineConfig.from_file(str(config_file))
    metadata = LMCacheMetadata(
        model_name="kvtier-bench",
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=torch.bfloat16,
        kv_shape=tuple(spec["kv_shape"]),
        chunk_size=int(settings["chunk_size"]),
        role="worker",
    )
    return StorageManager(config, metadata, EventManager())


def write_chunks(manager: Any, remote: str, hits: list[list[Any]], shape: list[int]) -> None:
    """Each chunk written by LMCache's own `put` (the fs connector's file format), random contents."""
    import torch
    from lmcache.v1.memory_management import MemoryFormat

    backend = manager.storage_backends[remote]
    chunk_shape = torch.Size([shape[0], shape[1], shape[2], shape[3] * shape[4]])
    for batch in hits:
        objs = [manager.allocate(chunk_shape, torch.bfloat16, MemoryFormat.KV_2LTD) for _ in batch]
        for obj in objs:
            obj.tensor.random_(0, 100)
        for future in [backend.submit_put_task(key, obj) for key, obj in zip(batch, objs, strict=True)]:
            future.result(timeout=600)
        for obj in objs:
            obj.ref_count_down()


def read_hits(manager: Any, remote: str, hits: list[list[Any]], tokens: int) -> tuple[int, float]:
    """Bytes read and seconds spent in lookups: each hit looked up and read as LMCache's retrieve does."""
    done, looking = 0, 0.0
    for batch in hits:
        infos = [(key, i * tokens, (i + 1) * tokens) for i, key in enumerate(batch)]
        asked = time.perf_counter()
        mapping = manager.get_block_mapping(infos)
        looking += time.perf_counter() - asked
        if list(mapping) != [remote] or len(mapping[remote]) != len(batch):
            raise RuntimeError(f"lookup found {[(k, len(v)) for k, v in mapping.items()]}, not L2")
        objs = manager.batched_get(batch, location=remote)
        if any(obj is None for obj in objs):
            raise RuntimeError("LMCache could not read a chunk it found")
        done += sum(obj.get_size() for obj in objs)
        for obj in objs:
            obj.ref_count_down()
    return done, looking


def vllm(spec: dict[str, Any]) -> dict[str, Any]:
    from vllm.v1.kv_offload.tiering.fs import io
    from vllm.v1.kv_offload.tiering.fs.thread_pool import DualQueueThreadPool

    folder = Path(spec["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    size, per_hit, count = spec["file_bytes"], spec["per_hit"], spec["files"]
    o_direct = io.probe_o_direct(str(folder))
    # The CPU tier's region: a page-aligned buffer of per_hit blocks (O_DIRECT needs aligned memory).
    import mmap

    region = mmap.mmap(-1, size * per_hit)
    view = memoryview(region)
    pattern = os.urandom(1 << 20)
    for start in range(0, len(view), len(pattern)):
        view[start : start + len(pattern)] = pattern[: len(view) - start]
    paths = [str(folder / f"{index:016x}.bin") for index in range(count)]
    offsets = [i * size for i in range(per_hit)]
    for start in range(0, count, per_hit):
        batch = paths[start : start + per_hit]
        io.batch_store_block(batch, view, offsets[: len(batch)], size, o_direct)
    pool = DualQueueThreadPool(spec["threads"], spec["threads"], thread_name_prefix="bench_fs")
    try:
        runs, plain = [], []
        files = [Path(p) for p in paths]
        for _ in range(spec["repeat"]):  # interleaved, so a change in the machine's load hits both alike
            if spec["evict"]:
                evict(files)
            started = time.perf_counter()
            for job, start in enumerate(range(0, count, per_hit)):
                batch = paths[start : start + per_hit]
                load = functools.partial(io.batch_load_block, batch, view, offsets[: len(batch)], size, o_direct)
                pool.enqueue_load(job, 1, [load])
                while not (finished := pool.get_finished()):  # one hit at a time, as a request waits for its load
                    time.sleep(0.0002)
                if not all(ok for _, ok, _ in finished):
                    raise RuntimeError(f"the fs tier failed to load a block of job {job}")
            runs.append((size * count, time.perf_counter() - started))
            plain.append(plain_pass(files, size, drop=spec["evict"]))
        return result(runs, plain, file_bytes=size, o_direct=o_direct)
    finally:
        pool.shutdown()
        view.release()
        region.close()


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    result = lmcache(spec) if spec["connector"] == "lmcache" else vllm(spec)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
