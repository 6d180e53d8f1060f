"""A CPU hog for the engine tests that must hold on a loaded machine (issue 38): one busy-looping process per core,
each in its own session, each ending by itself after `max_s` (bounded even if the test dies), stopped by PID by the
test on every path. What it burned (/proc/<pid>/stat) and how busy the machine's CPUs were over its window (/proc/stat:
the share of time not idle) are read before it stops, so a check can show the machine was in fact loaded for the whole
phase, whatever else ran on it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
LOOP = "import time\nend = time.monotonic() + {max_s}\nwhile time.monotonic() < end:\n    pass\n"


@dataclass
class Load:
    """What the hog did: processes, wall seconds from start to stop, CPU seconds they burned, the load average."""

    processes: int = 0
    pids: list[int] = field(default_factory=list)
    started: float = 0.0  # time.perf_counter()
    wall_s: float = 0.0
    cpu_s: float = 0.0
    loadavg_1m_at_stop: float = 0.0
    alive_at_stop: int = 0  # hog processes still running when the test stopped them (0: one ended early)
    machine_busy: float = 0.0  # share of the machine's CPU time that was not idle over the hog's window

    @property
    def cores_busy(self) -> float:
        """The hog's average CPU over the phase, in cores (2.0: both cores all the time, if nothing else ran)."""
        return self.cpu_s / self.wall_s if self.wall_s else 0.0


def _cpu_s(pid: int) -> float:
    """utime + stime of one process (fields 14 and 15 of /proc/<pid>/stat, after the command in parentheses)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    return 0.0


def cpu_times() -> tuple[int, int]:
    """(idle + iowait, total) jiffies of all CPUs, from the first line of /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text(encoding="ascii").splitlines()[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)


@contextmanager
def cpu_hog(max_s: float, processes: int | None = None) -> Iterator[Load]:
    """Busy loops on every core (default: os.cpu_count()) while the block runs; each ends by itself after `max_s`."""
    count = processes or os.cpu_count() or 2
    load = Load(processes=count)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", LOOP.format(max_s=max_s)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        load.pids = [p.pid for p in procs]
        load.started = time.perf_counter()
        idle_before, total_before = cpu_times()
        yield load
    finally:
        load.wall_s = time.perf_counter() - load.started if load.started else 0.0
        if load.started:
            idle_after, total_after = cpu_times()
            spent = total_after - total_before
            load.machine_busy = 1 - (idle_after - idle_before) / spent if spent > 0 else 0.0
        load.alive_at_stop = sum(1 for p in procs if p.poll() is None)
        load.cpu_s = sum(_cpu_s(p.pid) for p in procs)
        load.loadavg_1m_at_stop = os.getloadavg()[0]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
