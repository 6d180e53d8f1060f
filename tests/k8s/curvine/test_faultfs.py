"""The fault-injecting FUSE fixture itself, on a real kernel mount: each fault answers as documented, switches at run
time, and the mount is gone afterwards on every path (a hung operation and a killed daemon included)."""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.k8s.curvine import faultfs
from tests.k8s.curvine.faultfs import _is_mounted, mount


def errno_of(call: Callable[[], object]) -> str:
    try:
        call()
    except OSError as err:
        return errno.errorcode[err.errno or 0]
    return "ok"


def listdir(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_each_fault_answers_as_curvine_does(tmp_path: Path) -> None:
    with mount(tmp_path) as fs:
        (fs.path / "lob").mkdir()
        (fs.path / "lob" / "a.data").write_bytes(b"chunk-a")
        (fs.path / "lob" / "b.data").write_bytes(b"chunk-b")
        assert (fs.source / "lob" / "a.data").read_bytes() == b"chunk-a", "a passthrough"
        held = os.open(fs.path / "lob" / "a.data", os.O_RDONLY)
        try:
            fs.set_fault("master_down", block_s=0.3)
            started = time.monotonic()
            assert errno_of(lambda: listdir(fs.path / "lob")) == "EIO"
            assert time.monotonic() - started >= 0.3, "blocks first, like Curvine's client retrying"
            assert errno_of((fs.path / "lob" / "b.data").read_bytes) == "EIO"
            assert os.pread(held, 7, 0) == b"chunk-a", "a file opened before keeps reading"

            fs.set_fault("slow", delay_s=0.2)
            assert errno_of(lambda: os.pread(held, 7, 0)) == "ETIMEDOUT"

            fs.set_fault("lost", paths=["lob/b.data"])
            assert errno_of((fs.path / "lob" / "b.data").read_bytes) == "EIO"
            assert (fs.path / "lob" / "a.data").read_bytes() == b"chunk-a", "only the chosen files"

            fs.set_fault("full")
            assert errno_of(lambda: (fs.path / "lob" / "c.data").write_bytes(b"x")) == "ENOSPC"

            fs.set_fault("none")
            assert listdir(fs.path / "lob") == ["a.data", "b.data"]
        finally:
            os.close(held)
        fs.kill_daemon()
        assert errno_of(lambda: listdir(fs.path)) == "ENOTCONN", "a dead FUSE pod's bind mount"
    assert not _is_mounted(tmp_path / "mnt")


def direct_read(path: Path, size: int) -> int:
    """What vLLM's fs tier does to load a block: open with O_DIRECT, read into page-aligned memory."""
    buffer = mmap.mmap(-1, size)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            return os.readv(fd, [memoryview(buffer)])
        finally:
            os.close(fd)
    finally:
        buffer.close()


def test_o_direct_reads_work_as_on_curvine_unless_the_fault_fails_them(tmp_path: Path) -> None:
    """Curvine's FUSE keeps only the access mode, O_CREAT, O_EXCL, O_TRUNC and O_APPEND of an open (its `OpenFlags`),
    so an O_DIRECT read reaches it as any other; `odirect_einval` is the FUSE daemon that passes O_DIRECT on."""
    with mount(tmp_path) as fs:
        block = os.urandom(1 << 20)
        (fs.path / "block.bin").write_bytes(block)
        assert direct_read(fs.path / "block.bin", len(block)) == len(block)
        fs.set_fault("odirect_einval")
        assert errno_of(lambda: direct_read(fs.path / "block.bin", len(block))) == "EINVAL"
        assert (fs.path / "block.bin").read_bytes() == block, "buffered reads still work"
        fs.set_fault("none")
        assert direct_read(fs.path / "block.bin", len(block)) == len(block)


def test_a_hung_op_waits_for_release_and_never_hangs_the_unmount(tmp_path: Path) -> None:
    outcome: list[str] = []
    with mount(tmp_path) as fs:
        (fs.path / "x").write_bytes(b"x")
        fs.set_fault("hung")
        reader = threading.Thread(target=lambda: outcome.append(errno_of(lambda: listdir(fs.path))), daemon=True)
        reader.start()
        reader.join(0.5)
        assert reader.is_alive(), "hung until released"
        fs.set_fault("none")
        reader.join(5)
        assert outcome == ["ok"]
        fs.set_fault("hung")
        stuck = threading.Thread(target=lambda: errno_of(lambda: listdir(fs.path)), daemon=True)
        stuck.start()
        started = time.monotonic()
    assert time.monotonic() - started < 15, "leaving the block with an op still hung is bounded"
    stuck.join(5)
    assert not _is_mounted(tmp_path / "mnt")


def test_an_error_inside_the_block_still_unmounts(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), mount(tmp_path) as fs:
        fs.set_fault("hung")
        raise RuntimeError("boom")
    assert not _is_mounted(tmp_path / "mnt")


def test_an_unknown_fault_is_refused(tmp_path: Path) -> None:
    with mount(tmp_path) as fs, pytest.raises(ValueError, match="unknown fault 'flaky'"):
        fs.set_fault("flaky")


def test_no_fuse_skips_outside_ci_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faultfs, "fuse_unavailable", lambda: "no /dev/fuse")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no /dev/fuse"):
        faultfs.require_fuse()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="FUSE is required under CI: no /dev/fuse"):
        faultfs.require_fuse()
