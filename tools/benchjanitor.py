"""Time and measure the L2 janitor on a large tree: one pass over N files (listing, accounting, the budget plan), as
its own process, the way the Deployment runs it. Prints (or writes) a Markdown section for docs/benchmarks.md.

    python -m tools.benchjanitor [--files 1000000] [--per-dir 1000] [--workdir DIR] [--output FILE]

The tree is LMCache-like (`<endpoint>/<identity>/<hash>.data`, --per-dir files per directory), on local disk, with
sparse files of 36 MB (one Qwen3-8B chunk), so it costs inodes, not bytes. Two passes: under budget (listing and
accounting only) and a dry run at half the bytes (the over-budget sort too). Wall time, CPU time and peak RSS of the
janitor process (getrusage of the child); the container's limits are kvtier.sizing.JANITOR_RESOURCES.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtier.k8s.curvine.scripts import JANITOR
from kvtier.sizing import JANITOR_RESOURCES
from tools.benchdoc import write_section

SCRIPT = Path(__file__).resolve().parents[1] / "kvtier" / "k8s" / "curvine" / "scripts" / JANITOR
CHUNK_BYTES = 36 * 1024**2  # one Qwen3-8B chunk file (docs/l2.md)


def build_tree(root: Path, files: int, per_dir: int) -> float:
    """Sparse files in directories of `per_dir`; returns seconds taken."""
    started = time.monotonic()
    for start in range(0, files, per_dir):
        directory = root / "qwen3-8b" / f"id{start // per_dir:05d}"
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(start, min(start + per_dir, files)):
            fd = os.open(directory / f"{i:016x}.data", os.O_WRONLY | os.O_CREAT, 0o644)
            os.ftruncate(fd, CHUNK_BYTES)
            os.close(fd)
    return time.monotonic() - started


def measure(script: Path, root: Path, *args: str) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS MiB) of one janitor pass in its own process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(
        [sys.executable, str(script), str(root), "--once", "--max-age-hours=1000", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=3600,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss // 1024  # Linux: KiB


def section(files: int, per_dir: int, build_s: float, rows: list[tuple[str, tuple[float, float, int]]]) -> str:
    requests, limits = JANITOR_RESOURCES["requests"], JANITOR_RESOURCES["limits"]
    cpu_limit = limits.get("cpu")
    cpu_text = f"a CPU limit of {cpu_limit}" if cpu_limit else f"a CPU request of {requests['cpu']} and no CPU limit"
    lines = [
        "## L2 janitor at scale (`python -m tools.benchjanitor`)",
        "",
        f"One janitor pass over {files:,} files ({per_dir:,} per directory, sparse 36 MB files on local disk; building",
        f"the tree took {build_s:.0f} s), as its own process, on {platform.machine()} with Python "
        f"{platform.python_version()} ({os.cpu_count()} cores, shared). The janitor's container has "
        f"{cpu_text} (it runs on idle CPU, and at its request's share of a busy node's) and a memory limit of "
        f"{limits['memory']} (`kvtier.sizing.JANITOR_RESOURCES`). Times are on local disk: through FUSE, each "
        "directory listing and `stat` is a request to the daemon. Peak RSS is the largest of the passes so far "
        "(getrusage of the children), so a row never shows less than the one above it.",
        "",
        "| Pass | Wall (s) | CPU (s) | Peak RSS (MiB) |",
        "|---|---:|---:|---:|",
        *(f"| {name} | {wall:.1f} | {cpu:.1f} | {rss} |" for name, (wall, cpu, rss) in rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--per-dir", type=int, default=1000)
    parser.add_argument("--workdir", type=Path, default=None, help="where to build the tree (default: a temp dir)")
    parser.add_argument("--script", type=Path, default=SCRIPT, help="the janitor script to measure")
    parser.add_argument(
        "--compare", type=Path, default=None, help="also measure this janitor script (e.g. an older one)"
    )
    parser.add_argument("--compare-label", default="before", help="how the section names --compare's rows")
    parser.add_argument("--output", type=Path, default=None, help="write the section into this Markdown file")
    args = parser.parse_args(argv)
    if args.files < 1 or args.per_dir < 1:
        parser.error("--files and --per-dir must be at least 1")
    workdir = Path(tempfile.mkdtemp(prefix="kvtier-janitor-", dir=args.workdir))
    try:
        root = workdir / "l2"
        build_s = build_tree(root, args.files, args.per_dir)
        total_gb = args.files * CHUNK_BYTES / 1000**3
        rows: list[tuple[str, tuple[float, float, int]]] = []
        scripts = [("", args.script)] + ([(f" ({args.compare_label})", args.compare)] if args.compare else [])
        for label, script in scripts:  # peak RSS is the largest child's so far: the bigger script goes last
            rows += [
                (f"under budget (list, account){label}", measure(script, root, f"--budget-gb={total_gb * 2:.3f}")),
                (
                    f"dry run at half the bytes (list, account, sort){label}",
                    measure(script, root, f"--budget-gb={total_gb / 2:.3f}", "--dry-run"),
                ),
            ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    body = section(args.files, args.per_dir, build_s, rows)
    if args.output:
        write_section(args.output, "janitor", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
