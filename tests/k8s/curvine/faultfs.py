"""A real kernel FUSE mount that stands in for Curvine's FUSE and fails the way it does, switched at run time.

A passthrough filesystem (mfusepy over libfuse3, Debian `fuse3`) over a source directory runs in its own process, so
killing it leaves the kernel mount behind answering ENOTCONN, exactly like the bind mount of a dead Curvine FUSE pod.
Attribute and entry caching are off (`attr_timeout=0`, `entry_timeout=0`), so every lookup reaches the daemon.
The mount looks like Curvine's in the mount table: source `curvinefs`, type `fuse.curvinefs` (curvine-fuse
`fuse_pure.rs`, docs/references.md "Issue 22").

API (tests in tests/k8s/curvine and tests/engine; docs/l2.md "Failure modes, tested"):

    with mount(tmp_path) as fs:          # fs.path: the mount point; fs.source: the directory underneath
        fs.set_fault("master_down", block_s=2)
        fs.set_fault("none")
        fs.bind(target)                  # a bind mount of it, as curvine-csi gives each pod (lazily unmounted too)
        fs.kill_daemon()                 # SIGKILL: the mount and its bind mounts now answer ENOTCONN
        fs.restart()                     # a new daemon at the same mount point (a new FUSE connection), as
                                         # curvine-csi's FUSE pod after a crash; the bind mounts stay on the old one

Faults (`set_fault(kind, **params)`), each what docs/references.md "Issue 22" says Curvine does:
  - none
  - master_down(block_s=2.0): lookups, readdir, open and create block for block_s, then fail EIO; reads and writes
    of files opened before keep working (the worker still serves their blocks)
  - slow(delay_s=2.0): reads take delay_s, then fail ETIMEDOUT
  - lost(paths=[...]): reads of these files (paths relative to the mount) fail EIO
  - full: writes and creates fail ENOSPC
  - hung: every operation blocks until the fault changes (bounded by HUNG_LIMIT_S, then EIO)
  - odirect_einval: reads of a file opened with O_DIRECT fail EINVAL (not Curvine: a FUSE daemon that hands O_DIRECT
    on to a backing file and reads into unaligned buffers, as this fixture did before issue 40; vLLM's fs tier probes
    O_DIRECT with a write only, so on such a mount every L2 load fails)
Opens keep only the flags Curvine's FUSE keeps (`OPEN_FLAGS`): Curvine turns the kernel's open flags into its
`OpenFlags` with `from_bits_truncate` (access mode, O_CREAT, O_EXCL, O_TRUNC, O_APPEND) and reads through its client,
so O_DIRECT never reaches a backing store (docs/references.md "Issue 40"); the kernel's FUSE direct-I/O path serves
an O_DIRECT read as any other.
Mounting and unmounting are bounded in time; the exit path always lazily unmounts (`fusermount3 -uz`) and stops the
daemon by PID, whatever happened inside the block.

`require_fuse()` skips a test outside CI when this machine cannot mount FUSE (and says why), and fails it under CI.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtier.bench.testserver import stop_process

FAULTS = ("none", "master_down", "slow", "lost", "full", "hung", "odirect_einval")
# Curvine's `OpenFlags` (RDONLY, WRONLY, RDWR, CREAT, EXCL, TRUNC, APPEND; `new` is from_bits_truncate), applied to
# the kernel's flags by its FUSE's `NodeState::new_handle` (docs/references.md "Issue 40").
OPEN_FLAGS = os.O_ACCMODE | os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_APPEND
MOUNT_TIMEOUT_S = 15.0
UNMOUNT_TIMEOUT_S = 10.0
HUNG_LIMIT_S = 300.0  # a "hung" op gives up eventually, so a forgotten fault never outlives the test session
FUSERMOUNT = "fusermount3"


def fuse_unavailable() -> str | None:
    """Why this machine cannot mount a FUSE filesystem, or None when it can."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse (a container without the FUSE device)"
    if shutil.which(FUSERMOUNT) is None:
        return f"no {FUSERMOUNT} (Debian fuse3; `make fuse` installs it)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as err:  # OSError: mfusepy found no libfuse
        return f"mfusepy cannot load libfuse3: {err}"
    return None


def require_fuse() -> None:
    import pytest

    reason = fuse_unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"FUSE is required under CI: {reason}")
    pytest.skip(f"FUSE not available: {reason}")


def _mounts_at(path: Path) -> set[bytes]:
    """The ids of the mounts at `path` in this process's mount table."""
    target = os.fsencode(path.resolve()).replace(b" ", b"\\040")
    lines = Path("/proc/self/mountinfo").read_bytes().splitlines()
    return {line.split()[0] for line in lines if line.split()[4] == target}


def _is_mounted(path: Path) -> bool:
    return bool(_mounts_at(path))


@dataclass
class FaultFS:
    path: Path  # the mount point
    source: Path  # the directory it passes through to
    control: Path  # the JSON file the daemon reads its fault from
    process: subprocess.Popen[bytes]
    log: Path
    binds: list[Path] = field(default_factory=list)

    def bind(self, target: Path) -> Path:
        """Bind-mount the FUSE mount at `target` (created), as curvine-csi's NodePublish does for each pod."""
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(self.path), str(target)], check=True, timeout=UNMOUNT_TIMEOUT_S)
        self.binds.append(target)
        return target

    def set_fault(self, kind: str, **params: Any) -> None:
        """Switch the fault; takes effect for the next operation the daemon serves."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}: one of {', '.join(FAULTS)}")
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps({"kind": kind, **params}), encoding="utf-8")
        tmp.replace(self.control)

    def kill_daemon(self) -> None:
        """Kill the FUSE process as a crashed Curvine FUSE pod dies: the mount stays, answering ENOTCONN."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=UNMOUNT_TIMEOUT_S)

    def restart(self) -> None:
        """What a Curvine FUSE pod's restart does to the node: the dead mount is lazily unmounted (the pod's preStop,
        curvine-csi's stale-mount cleanup) and a new daemon mounts the same source at the same point, on a new FUSE
        connection. Bind mounts made before stay on the old, dead one."""
        self.kill_daemon()
        _unmount(self.path)
        before = _mounts_at(self.path)
        self.process = _start(self.source, self.path, self.control, self.log)
        _wait_mounted(self, before)

    def daemon_log(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]


def _unmount(path: Path) -> None:
    # Lazy: detaches at once even while an operation is stuck in the mount; the kernel drops it when unused.
    subprocess.run([FUSERMOUNT, "-u", "-z", str(path)], capture_output=True, timeout=UNMOUNT_TIMEOUT_S, check=False)


def _start(source: Path, mountpoint: Path, control: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, __file__, str(source), str(mountpoint), str(control)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _wait_mounted(fs: FaultFS, before: set[bytes]) -> None:
    """Until a mount not in `before` is at fs.path, the daemon's (bounded); raises with the daemon's log otherwise."""
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not _mounts_at(fs.path) - before:
        if fs.process.poll() is not None:
            raise RuntimeError(f"the FUSE daemon exited with {fs.process.returncode}: {fs.daemon_log()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no FUSE mount at {fs.path} within {MOUNT_TIMEOUT_S:.0f} s: {fs.daemon_log()}")
        time.sleep(0.05)


@contextmanager
def mount(tmpdir: Path, source: Path | None = None, mountpoint: Path | None = None) -> Iterator[FaultFS]:
    """Mount a fault-injecting passthrough of `source` (default: a new folder in tmpdir) at `mountpoint` (default:
    tmpdir/'mnt'; an existing live mount there is stacked on, as a FUSE pod's new mount on its predecessor's)."""
    require_fuse()
    tmpdir = Path(tmpdir)
    tmpdir.mkdir(parents=True, exist_ok=True)
    source = source or tmpdir / "source"
    source.mkdir(parents=True, exist_ok=True)
    mountpoint = mountpoint or tmpdir / "mnt"
    mountpoint.mkdir(parents=True, exist_ok=True)
    control = tmpdir / "fault.json"
    control.write_text(json.dumps({"kind": "none"}), encoding="utf-8")
    log = tmpdir / "faultfs.log"
    before = _mounts_at(mountpoint)
    fs = FaultFS(mountpoint, source, control, _start(source, mountpoint, control, log), log)
    try:
        _wait_mounted(fs, before)
        yield fs
    finally:
        fs.set_fault("none")  # releases anything hung inside before the unmount
        for target in reversed(fs.binds):
            subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=UNMOUNT_TIMEOUT_S, check=False)
        _unmount(mountpoint)
        stop_process(fs.process, UNMOUNT_TIMEOUT_S)
        if _mounts_at(mountpoint) - before:  # the daemon died before the first unmount took (never a mount below)
            _unmount(mountpoint)


# ---- the daemon (runs in its own process: `python faultfs.py SOURCE MOUNTPOINT CONTROL`) ---------------------------


class _Faults:
    """The current fault, re-read from the control file when it changes (one stat per operation)."""

    def __init__(self, control: str) -> None:
        self.control = control
        self.stamp: tuple[int, int] = (0, 0)
        self.current: dict[str, Any] = {"kind": "none"}
        self.lock = threading.Lock()

    def get(self) -> dict[str, Any]:
        try:
            info = Path(self.control).stat()
        except OSError:
            return self.current
        stamp = (info.st_mtime_ns, info.st_ino)
        with self.lock:
            if stamp != self.stamp:
                try:
                    self.current = json.loads(Path(self.control).read_text(encoding="utf-8"))
                    self.stamp = stamp
                except (OSError, ValueError):
                    pass  # being replaced: the next operation reads it
            return self.current


def _serve(source: str, mountpoint: str, control: str) -> None:
    import mfusepy

    faults = _Faults(control)

    def fail(code: int) -> mfusepy.FuseOSError:
        return mfusepy.FuseOSError(code)

    def hang_while_hung() -> None:
        deadline = time.monotonic() + HUNG_LIMIT_S
        while faults.get().get("kind") == "hung":
            if time.monotonic() > deadline:
                raise fail(errno.EIO)
            time.sleep(0.05)

    def metadata_op() -> None:
        """Lookups, listings, opens: what needs Curvine's master."""
        hang_while_hung()
        fault = faults.get()
        if fault.get("kind") == "master_down":
            time.sleep(float(fault.get("block_s", 2.0)))
            raise fail(errno.EIO)

    direct_handles: set[int] = set()  # handles opened with O_DIRECT (what the odirect_einval fault fails)

    def data_read(path: str, fh: int) -> None:
        hang_while_hung()
        fault = faults.get()
        kind = fault.get("kind")
        if kind == "odirect_einval" and fh in direct_handles:
            raise fail(errno.EINVAL)
        if kind == "slow":
            time.sleep(float(fault.get("delay_s", 2.0)))
            raise fail(errno.ETIMEDOUT)
        if kind == "lost" and path.lstrip("/") in {str(p).lstrip("/") for p in fault.get("paths", [])}:
            raise fail(errno.EIO)

    def data_write() -> None:
        hang_while_hung()
        if faults.get().get("kind") == "full":
            raise fail(errno.ENOSPC)

    def real(path: str) -> Path:
        return Path(source) / path.lstrip("/")

    def passthrough(call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except OSError as err:
            raise fail(err.errno or errno.EIO) from err

    class Passthrough(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            if fh is None:  # a lookup by name; fstat on an open handle needs no master
                metadata_op()
                st = passthrough(os.lstat, real(path))
            else:
                hang_while_hung()
                st = passthrough(os.fstat, fh)
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino")
            attrs = {key: getattr(st, key) for key in keys}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return attrs

        def readdir(self, path: str, fh: int) -> list[str]:  # noqa: ARG002 (libfuse's signature)
            metadata_op()
            return [".", "..", *passthrough(os.listdir, real(path))]

        def open(self, path: str, flags: int) -> int:
            metadata_op()
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC):
                data_write()
            fh = int(passthrough(os.open, real(path), flags & OPEN_FLAGS))
            if flags & os.O_DIRECT:
                direct_handles.add(fh)
            return fh

        def create(self, path: str, mode: int, fi: Any = None) -> int:  # noqa: ARG002 (libfuse's signature)
            metadata_op()
            data_write()
            return int(passthrough(os.open, real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            data_read(path, fh)
            return bytes(passthrough(os.pread, fh, size, offset))

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:  # noqa: ARG002 (libfuse's signature)
            data_write()
            return int(passthrough(os.pwrite, fh, data, offset))

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            data_write()
            if fh is None:
                passthrough(os.truncate, real(path), length)
            else:
                passthrough(os.ftruncate, fh, length)
            return 0

        def flush(self, path: str, fh: int) -> int:  # noqa: ARG002 (libfuse's signature)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:  # noqa: ARG002 (libfuse's signature)
            passthrough(os.fsync, fh)
            return 0

        def release(self, path: str, fh: int) -> int:  # noqa: ARG002 (libfuse's signature)
            direct_handles.discard(fh)
            os.close(fh)
            return 0

        def unlink(self, path: str) -> int:
            metadata_op()
            passthrough(os.unlink, real(path))
            return 0

        def rename(self, old: str, new: str) -> int:
            metadata_op()
            passthrough(os.rename, real(old), real(new))
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            metadata_op()
            passthrough(os.mkdir, real(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            metadata_op()
            passthrough(os.rmdir, real(path))
            return 0

        def chmod(self, path: str, mode: int) -> int:
            metadata_op()
            passthrough(os.chmod, real(path), mode)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            metadata_op()
            target = real(path)
            passthrough(lambda: os.utime(target) if times is None else os.utime(target, ns=times))
            return 0

        def statfs(self, path: str) -> dict[str, int]:  # noqa: ARG002 (libfuse's signature)
            hang_while_hung()
            st = os.statvfs(source)
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_frsize")
            return {key: getattr(st, key) for key in keys} | {"f_namemax": st.f_namemax}

    mfusepy.FUSE(
        Passthrough(),
        mountpoint,
        foreground=True,
        fsname="curvinefs",
        subtype="curvinefs",
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        direct_io=True,  # no page cache: every read reaches the daemon, so read faults show at once
    )


if __name__ == "__main__":
    _serve(*sys.argv[1:4])
