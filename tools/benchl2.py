"""L2 read efficiency (issue 40): how fast each connector's own storage code moves an L2 hit from chunk files into
its memory, against a plain reader of the same files on the same mount. Writes (or prints) a Markdown section for
docs/benchmarks.md.

    python -m tools.benchl2 [--engine-python .venv-engine/bin/python] [--repeat 5] [--output docs/benchmarks.md]

Mounts: tmpfs (/dev/shm: the memory limit), a directory on the disk (pages dropped before every pass, so it is read
from the disk), and tests/k8s/curvine/faultfs.py's real kernel FUSE mount over a disk directory (no fault: a
Python passthrough, a FUSE data point, not Curvine's speed). Connectors, with kvtier's rendered settings and the
dev `retail/qwen3-8b` endpoint's KV shape (Qwen3-8B, bf16: 147,456 bytes a token), at the chunk sizes kvtier
allows (LMCache `cache.chunk_size`; vLLM's fs tier: one file a `block_size` block): tools/l2read.py runs each point
in the engine venv. An L2 hit is HIT_TOKENS tokens; each point reads about POINT_BYTES in hits, one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtier.catalog import MODELS, Model
from kvtier.config.endpoint import CacheConfig
from kvtier.connectors.lmcache import lmcache_config
from tools.benchdoc import write_section

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"
READER = ROOT / "tools" / "l2read.py"
MODEL_ID = "Qwen/Qwen3-8B"  # the dev retail endpoint's model (config/lobs/retail.yaml)
LMCACHE_CHUNKS = (16, 64, 256, 1024, 4096)  # tokens; kvtier allows 16-4096 (kvtier/config/endpoint.py)
VLLM_BLOCKS = (16, 32, 128)  # tokens; kvtier allows block_size 8-128, and the fs tier writes one file a block
# Engine points (tools/l2engines.py): vLLM-CPU runs block sizes that are multiples of 32 only; LMCache's smallest
# chunk (the most files a hit) and the example endpoint's.
ENGINE_SIZES = (("lmcache", 16), ("lmcache", 256), ("vllm", 32), ("vllm", 128))
HIT_TOKENS = 4096
POINT_BYTES = 600 << 20
# LMCache's CPU buffer (L1) for the run: what this machine can give, not kvtier's 20 GiB (the buffer's size
# changes nothing a read does as long as one hit fits).
MACHINE_L1_GIB = 3.0
READ_THREADS = 16  # vLLM's fs tier default (vllm/v1/kv_offload/tiering/fs/manager.py `n_read_threads`)
POINT_TIMEOUT_S = 1200


@dataclass(frozen=True)
class Point:
    connector: str  # lmcache | vllm
    mount: str  # tmpfs | disk | fuse
    tokens: int  # per file
    file_bytes: int
    plain: float  # bytes per second
    read: float
    ratio: float  # median of the interleaved passes' ratios
    lookup_share: float | None = None  # LMCache: the part of a hit spent in the lookup
    o_direct: bool | None = None
    failed: str = ""  # why the connector could not read the files (then the rates are 0)


def kv_shape(model: Model, tokens: int) -> list[int]:
    """LMCache's chunk shape (layers, K and V, tokens, KV heads, head size) of a GQA model."""
    return [model.layers, 2, tokens, model.kv_heads, model.head_dim]


def lmcache_settings(chunk_tokens: int) -> dict[str, Any]:
    """kvtier's LMCache settings for an endpoint with this chunk size (kvtier/connectors/lmcache.py), with the
    machine's L1 buffer; `remote_url` is set by the reader to its folder."""
    settings = lmcache_config(CacheConfig(chunk_size=chunk_tokens), "bench")
    return settings | {"max_local_cpu_size": MACHINE_L1_GIB}


def spec(connector: str, folder: Path, tokens: int, model: Model, repeat: int, *, evict: bool) -> dict[str, Any]:
    file_bytes = tokens * model.kv_bytes_per_token
    per_hit = max(1, HIT_TOKENS // tokens)
    files = max(per_hit, POINT_BYTES // file_bytes // per_hit * per_hit)
    return {
        "connector": connector,
        "dir": str(folder),
        "file_bytes": file_bytes,
        "files": files,
        "per_hit": per_hit,
        "repeat": repeat,
        "evict": evict,
        "threads": READ_THREADS,
        "lmcache": lmcache_settings(tokens),
        "kv_shape": kv_shape(model, tokens),
    }


class PointError(RuntimeError):
    """tools/l2read.py failed on a point: its last line (the error the connector met)."""


def run_point(python: Path, point_spec: dict[str, Any], scratch: Path) -> dict[str, Any]:
    path = scratch / "spec.json"
    path.write_text(json.dumps(point_spec), encoding="utf-8")
    Path(point_spec["dir"]).mkdir(parents=True, exist_ok=True)
    try:
        run = subprocess.run(
            [str(python), str(READER), str(path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=POINT_TIMEOUT_S,
            check=False,
        )
    finally:
        shutil.rmtree(point_spec["dir"], ignore_errors=True)
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        raise PointError(lines[-1][:300] if lines else f"tools/l2read.py exited {run.returncode}")
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


@dataclass(frozen=True)
class Mount:
    name: str  # tmpfs | disk | fuse
    root: Path
    evict: bool  # drop the files' cached pages before each read
    fault: Any = None  # the FUSE fixture (tests/k8s/curvine/faultfs.py FaultFS), to switch its faults


@contextmanager
def mounts(scratch: Path, fuse: bool) -> Iterator[list[Mount]]:
    """Each mount: tmpfs, disk and, with `fuse`, the FUSE fixture."""
    shm = Path(tempfile.mkdtemp(prefix="kvtier-benchl2-", dir="/dev/shm"))
    disk = scratch / "disk"
    disk.mkdir()
    found = [Mount("tmpfs", shm, False), Mount("disk", disk, True)]
    try:
        if not fuse:
            yield found
            return
        from tests.k8s.curvine.faultfs import mount

        with mount(scratch / "fuse") as fs:
            yield [*found, Mount("fuse", fs.path, True, fs)]
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def measure(python: Path, repeat: int, fuse: bool, only: Sequence[str] = ()) -> list[Point]:
    """Every point, mount by mount; `only`: just these mounts."""
    model = MODELS[MODEL_ID]
    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="kvtier-benchl2-", dir="/var/tmp") as folder:
        scratch = Path(folder)
        with mounts(scratch, fuse) as found:
            for found_mount in found:
                name = found_mount.name
                if only and name not in only:
                    continue
                sizes = [("lmcache", tokens) for tokens in LMCACHE_CHUNKS] + [("vllm", t) for t in VLLM_BLOCKS]
                for connector, tokens in sizes:
                    target = found_mount.root / f"{connector}-{tokens}"
                    point = spec(connector, target, tokens, model, repeat, evict=found_mount.evict)
                    try:
                        result = run_point(python, point, scratch)
                    except PointError as err:  # a connector that cannot read this mount is a result too
                        points.append(Point(connector, name, tokens, point["file_bytes"], 0, 0, 0, failed=str(err)))
                        print(f"benchl2: {points[-1]}", file=sys.stderr, flush=True)
                        continue
                    points.append(
                        Point(
                            connector,
                            name,
                            tokens,
                            int(result["file_bytes"]),
                            float(result["plain"]["rate"]),
                            float(result["connector"]["rate"]),
                            float(result["ratio"]),
                            result.get("lookup_share"),
                            result.get("o_direct"),
                        )
                    )
                    print(f"benchl2: {points[-1]}", file=sys.stderr, flush=True)
    return points


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


TITLES = {"lmcache": "LMCache `fs://`", "vllm": "vLLM fs tier"}


def table(points: Sequence[Point]) -> list[str]:
    lines = [
        "| connector | mount | tokens a file | MB a file | plain reader GB/s | connector GB/s | ratio | lookup share |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        share = f"{p.lookup_share:.0%}" if p.lookup_share is not None else ""
        if p.failed:
            lines.append(
                f"| {TITLES[p.connector]} | {p.mount} | {p.tokens:,} | {p.file_bytes / 1e6:,.1f} | | | failed: "
                f"{p.failed.replace('|', '/')} | |"
            )
            continue
        lines.append(
            f"| {TITLES[p.connector]} | {p.mount} | {p.tokens:,} | {p.file_bytes / 1e6:,.1f} | {p.plain / 1e9:.2f} | "
            f"{p.read / 1e9:.2f} | {p.ratio:.2f} | {share} |"
        )
    return lines


def section(points: Sequence[Point], repeat: int, load_before: str) -> str:
    ratios = {
        c: statistics.median(p.ratio for p in points if p.connector == c and not p.failed)
        for c in TITLES
        if any(p.connector == c and not p.failed for p in points)
    }
    lines = [
        "## L2 read efficiency (`make bench-l2`)",
        "",
        f"Measured with `python -m tools.benchl2` on {platform.machine()}, {os.cpu_count()} CPUs shared with other "
        f"work (load average before: {load_before}, after: {load_average()}), LMCache 0.4.3 and vLLM 0.32.0 from "
        f"the engine venv. KV shape of the dev endpoint's {MODEL_ID} (bf16); one L2 hit is {HIT_TOKENS:,} tokens "
        f"of files, about {POINT_BYTES >> 20} MiB of hits a point, one hit at a time; {repeat} interleaved passes "
        "of connector and plain reader, and the fastest pass of each (the one other work slowed least, as `timeit` "
        "does): rates and ratio (connector over plain reader, same files, same mount).",
        "",
        "- LMCache: its own `StorageManager` with kvtier's rendered settings (`fs://` RemoteBackend, `remote_serde` "
        "naive, `save_chunk_meta` on; its L1 buffer cut to what this machine has): the lookup (`get_block_mapping`, "
        "one existence check a chunk) and `batched_get` of each hit into its CPU memory objects, as a worker's "
        "retrieve does. On a GPU node the copy from those objects to the GPU follows; this CPU machine does not "
        "measure it, so these rows are the fs connector's read only.",
        "- vLLM: its fs tier's own `batch_load_block` (the C extension) on the tier's thread pool, one job a hit, into "
        "a buffer the size of the CPU tier's blocks, O_DIRECT where the mount takes it (the tier's own probe); the "
        "CPU-tier-to-GPU copy is not measured either.",
        "- Plain reader: each file opened, read whole into one buffer and closed, one after another (what `cat` "
        "does). Before every pass of either reader the disk and FUSE files' cached pages are dropped "
        "(`posix_fadvise(DONTNEED)`); tmpfs has no other copy.",
        "",
        *table(points),
        "",
        "Median ratio over all points: " + ", ".join(f"{TITLES[c]} {r:.2f}" for c, r in ratios.items()) + ".",
    ]
    return "\n".join(lines) + "\n"


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def engine_size(text: str) -> tuple[str, int]:
    """`lmcache:256` or `vllm:32` (argparse type)."""
    connector, _, tokens = text.partition(":")
    if connector not in TITLES or not tokens.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: use CONNECTOR:TOKENS, e.g. lmcache:256 or vllm:32")
    return connector, int(tokens)


def measure_engines(args: argparse.Namespace) -> str:
    """The engine-mode rows (tools/l2engines.py), as their docs/benchmarks.md section."""
    from tools import l2engines

    passes = max(1, args.passes)
    if args.from_log:
        logged = l2engines.read_log(args.from_log)
        first, last = (logged[0].detail, logged[-1].detail) if logged else ({}, {})
        before, after = first.get("load_before", "not recorded"), last.get("load_after", "not recorded")
        return l2engines.section(logged, passes, before, after)
    load_before = load_average()
    lock = None if args.engine_lock == "none" else Path(args.engine_lock)
    with (
        tempfile.TemporaryDirectory(prefix="kvtier-benchl2-", dir="/var/tmp") as folder,
        mounts(Path(folder), not args.no_fuse) as found,
    ):
        order = list(args.mounts) or [m.name for m in found]  # the order asked for: a stopped run keeps the first
        chosen = sorted((m for m in found if m.name in order), key=lambda m: order.index(m.name))
        points = l2engines.measure(
            args.engine_python, chosen, Path(folder), args.engine_sizes, passes=passes, lock=lock, log=args.log
        )
    return l2engines.section(points, passes, load_before, load_average())


def main(argv: Sequence[str] | None = None) -> int:
    from tools import l2engines

    parser = argparse.ArgumentParser(prog="python -m tools.benchl2", description=__doc__)
    parser.add_argument("--engine-python", type=Path, default=ENGINE_PYTHON, help="the engine venv's python")
    parser.add_argument(
        "--mode",
        choices=("storage", "engines", "both"),
        default="both",
        help="the connectors' storage code (no engine), real engines (tools/l2engines.py, under the engine lock), "
        "or both (default)",
    )
    parser.add_argument("--repeat", type=int, default=5, help="interleaved passes a storage-code point (default 5)")
    parser.add_argument("--passes", type=int, default=l2engines.PASSES, help="L2 hits an engine point reads")
    parser.add_argument(
        "--engine-sizes",
        nargs="+",
        type=engine_size,
        default=list(ENGINE_SIZES),
        help="engine points as CONNECTOR:TOKENS (default: " + " ".join(f"{c}:{t}" for c, t in ENGINE_SIZES) + ")",
    )
    parser.add_argument(
        "--engine-lock",
        default=str(l2engines.ENGINE_LOCK),
        help="the machine-wide engine lock, held while a point's engines run; `none` when the caller holds it "
        "(under `flock`, which this must then not wait for)",
    )
    parser.add_argument("--no-fuse", action="store_true", help="skip the FUSE mount (it needs fuse3)")
    parser.add_argument(
        "--mounts", nargs="+", choices=("tmpfs", "disk", "fuse"), default=(), help="only these (engines: in this order)"
    )
    parser.add_argument("--log", type=Path, help="engine mode: append each row to this JSON-lines file as measured")
    parser.add_argument(
        "--from-log", type=Path, help="engine mode: write the section from such a file, measure nothing"
    )
    parser.add_argument("--output", type=Path, help="update this Markdown file's sections instead of printing")
    args = parser.parse_args(argv)
    if not args.engine_python.exists():
        print(f"{parser.prog}: no engine venv python at {args.engine_python}; run `make test-engine` once (or "
              "`python3 tests/engine/venv.py requirements-engine.txt .venv-engine`)", file=sys.stderr)  # fmt: skip
        return 2
    signal.signal(signal.SIGTERM, _stop)  # so the mounts and scratch folders are cleaned up (their `finally`)
    texts = []
    if args.mode in ("storage", "both"):
        load_before = load_average()
        points = measure(args.engine_python, max(1, args.repeat), fuse=not args.no_fuse, only=args.mounts)
        texts.append(("l2-read", section(points, max(1, args.repeat), load_before)))
    if args.mode in ("engines", "both"):
        texts.append(("l2-read-engines", measure_engines(args)))
    for key, text in texts:
        if args.output:
            write_section(args.output, key, text)
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
