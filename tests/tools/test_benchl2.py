"""tools/benchl2.py and tools/l2read.py (the L2 read benchmark): the points it measures are the sizes kvtier allows
with kvtier's own LMCache settings, the plain reader reads every byte of every file, the ratio pairs interleaved
passes, and the section says what it measured. The connectors' own code runs only in the engine venv (make
bench-l2); what runs here is everything around it."""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
from pathlib import Path

import pytest

from kvtier.catalog import MODELS
from kvtier.config.endpoint import CacheConfig
from kvtier.connectors.lmcache import lmcache_config
from tools import benchl2, l2read

QWEN3 = MODELS["Qwen/Qwen3-8B"]


def test_the_chunk_sizes_are_the_ones_kvtier_allows() -> None:
    field = CacheConfig.model_fields["chunk_size"]
    low = next(m.ge for m in field.metadata if hasattr(m, "ge"))
    high = next(m.le for m in field.metadata if hasattr(m, "le"))
    assert min(benchl2.LMCACHE_CHUNKS) == low and max(benchl2.LMCACHE_CHUNKS) == high
    assert set(benchl2.VLLM_BLOCKS) <= {8, 16, 32, 64, 128}


@pytest.mark.parametrize("tokens", [16, 256, 4096])
def test_a_point_is_kvtiers_rendering_at_the_models_kv_shape(tmp_path: Path, tokens: int) -> None:
    spec = benchl2.spec("lmcache", tmp_path / "x", tokens, QWEN3, 3, evict=True)
    assert spec["kv_shape"] == [36, 2, tokens, 8, 128]
    assert spec["file_bytes"] == tokens * 147_456
    assert spec["per_hit"] * tokens == max(benchl2.HIT_TOKENS, tokens)
    assert spec["files"] % spec["per_hit"] == 0 and spec["files"] >= spec["per_hit"]
    rendered = lmcache_config(CacheConfig(chunk_size=tokens), "bench")
    assert spec["lmcache"] == rendered | {"max_local_cpu_size": benchl2.MACHINE_L1_GIB}
    assert spec["lmcache"]["extra_config"] == {"save_chunk_meta": True} and spec["lmcache"]["remote_serde"] == "naive"


def test_the_plain_reader_reads_every_byte_and_pages_can_be_dropped(tmp_path: Path) -> None:
    files = []
    for index, size in enumerate((1, 5000, 3 << 20)):
        path = tmp_path / f"{index}.data"
        path.write_bytes(b"x" * size)
        files.append(path)
    l2read.evict(files)
    done, seconds = l2read.plain_read(files, 1 << 20)
    assert done == 1 + 5000 + (3 << 20) and seconds > 0


def test_the_ratio_is_fastest_pass_over_fastest_pass() -> None:
    connector = [(100, 1.0), (100, 4.0), (100, 2.0)]  # 100, 25, 50 B/s
    plain = [(100, 2.0), (100, 0.5), (100, 1.0)]  # 50, 200, 100 B/s
    assert l2read.paired(connector, plain) == 0.5
    assert l2read.best(connector)["rate"] == 100.0 and l2read.best(connector)["median"] == 50.0


def test_the_section_has_one_row_a_point_and_the_median_ratio_per_connector() -> None:
    points = [
        benchl2.Point("lmcache", "tmpfs", 256, 37_748_764, 2e9, 1.6e9, 0.8, 0.02),
        benchl2.Point("lmcache", "disk", 256, 37_748_764, 1e9, 1.5e9, 1.5, 0.05),
        benchl2.Point("vllm", "tmpfs", 16, 2_359_296, 2e9, 1e9, 0.5, None, True),
    ]
    text = benchl2.section(points, 3, "1.00 / 1.00 / 1.00")
    assert "| LMCache `fs://` | tmpfs | 256 | 37.7 | 2.00 | 1.60 | 0.80 | 2% |" in text
    assert "| vLLM fs tier | tmpfs | 16 | 2.4 | 2.00 | 1.00 | 0.50 |  |" in text
    assert "LMCache `fs://` 1.15, vLLM fs tier 0.50" in text
    assert "the GPU" in text  # says that the copy to a GPU is not measured


def test_without_the_engine_venv_it_says_how_to_get_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert benchl2.main(["--engine-python", str(tmp_path / "none")]) == 2
    assert "make test-engine" in capsys.readouterr().err


def test_a_point_the_connector_cannot_read_is_a_row_saying_why() -> None:
    failed = benchl2.Point("vllm", "fuse", 16, 2_359_296, 0, 0, 0, failed="OSError: [Errno 22] Invalid argument")
    ok = benchl2.Point("vllm", "tmpfs", 16, 2_359_296, 2e9, 1e9, 0.5)
    text = benchl2.section([failed, ok], 3, "-")
    assert "| vLLM fs tier | fuse | 16 | 2.4 | | | failed: OSError: [Errno 22] Invalid argument | |" in text
    assert "vLLM fs tier 0.50" in text


def test_a_reader_that_fails_is_a_point_error_with_its_last_line(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Traceback ...' >&2\necho 'OSError: [Errno 22] Invalid argument' >&2\nexit 1\n")
    fake.chmod(0o755)
    spec = benchl2.spec("vllm", tmp_path / "point", 16, QWEN3, 1, evict=False)
    with pytest.raises(benchl2.PointError, match=r"^OSError: \[Errno 22\] Invalid argument$"):
        benchl2.run_point(fake, spec, tmp_path)
    assert not (tmp_path / "point").exists()  # the point's files are removed either way


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache (mincore(2) over a private mapping of the file)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_COPY) as mapped:
        vector = (ctypes.c_ubyte * pages)()
        address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
        if libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(byte & 1 for byte in vector) * mmap.PAGESIZE


def test_eviction_drops_the_pages_of_a_file_just_written() -> None:
    """A file a connector has just written is mostly dirty pages, which posix_fadvise(DONTNEED) alone leaves cached
    (about 75% of 268 MB here): its next read would come from memory. On a disk folder, not tmpfs."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as folder:
        path = Path(folder) / "chunk.data"
        with path.open("wb") as out:
            for _ in range(64):
                out.write(os.urandom(1 << 20))
        assert resident_bytes(path) > 32 << 20  # written, not yet flushed: in the page cache
        l2read.evict([path])
        assert resident_bytes(path) == 0
