"""Run a Python module as `python -m MODULE ARGS...` does, then write the process's own peak resident memory.

    python -m tools.peakrss OUTFILE MODULE [ARGS...]

A benchmark cannot take a child's peak from `getrusage` or `wait4`: Linux folds the memory of the process that
forked it (before the child's exec) into the child's `ru_maxrss`, so every child of a large benchmark process looks
at least as large as its parent. `VmHWM` of /proc/self/status is the high-water mark of the memory the child mapped
after its exec alone; it is written to OUTFILE (bytes) when the module ends, however it ends.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def peak_bytes() -> int:
    """This process's peak resident set size since its exec (VmHWM, in kB), in bytes."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmHWM line (not Linux?)")


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m tools.peakrss OUTFILE MODULE [ARGS...]")
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        Path(out).write_text(str(peak_bytes()), encoding="ascii")


if __name__ == "__main__":
    main()
