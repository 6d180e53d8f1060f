#!/usr/bin/env python3
"""kvtier L2 janitor: keeps one line of business's L2 directory within its age and size budget.

Neither LMCache's fs connector nor Curvine v0.4.1 (as kvtier configures it) evicts anything, so this runs as a
Deployment that mounts the LOB's L2 volume and makes one pass every --interval-seconds (docs/l2.md). One pass:
  1. list every regular file (a listing that fails, e.g. a dead FUSE mount, ends the process with exit 3 and deletes
     nothing: the Deployment restarts it, and `kvtier_janitor_last_success_timestamp_seconds` stops moving);
  2. stale temporary files: `*.tmp` not modified for --tmp-max-age-minutes (LMCache writes `<file>.tmp`, then renames;
     a younger one is a write in progress and is never deleted);
  3. with --delete-unused, files outside every --in-use directory (`<endpoint>/<identity>`) older than
     --unused-grace-minutes, then the emptied directories: a changed model identity or a removed endpoint;
  4. files not modified for --max-age-hours;
  5. if the directory still holds more than --budget-gb, the least recently written files until it holds at most
     --target-fraction of the budget. Curvine does not update access times on reads (docs/references.md), so "least
     recently written" is the best order it offers; a hot prefix that goes is written again by the next engine that
     misses it, with a fresh mtime;
  6. only then, files whose blocks are gone, bounded so the budget is never starved: after Curvine reports a lost
     worker not handled before (--master-url, `/api/workers`) or every --probe-interval-minutes, a probe round reads
     1 byte at the start and end of each file, at most --probe-max-files files and --probe-seconds per pass, resuming
     where the last pass stopped. EIO (Curvine's "all replicas has been lost") makes a file a suspect; a suspect that
     fails EIO again on a later pass is deleted (one transient EIO condemns nothing); ETIMEDOUT (a slow worker)
     skips the file; any other error (a dead mount) ends the round for this pass. The round, the suspects and the
     lost workers already handled survive restarts in `<root>/.kvtier-janitor-state.json` (--keep-state).
Directories, symlinks and other non-regular files are never deleted (only directories emptied in step 3).
--budget-gb is decimal GB (10^9 bytes), as the LOB's l2.budget_gb.

Serves Prometheus metrics on --metrics-port (/metrics) and /healthz (200 while passes succeed, for the liveness
probe). --once makes one pass and exits (tests, the real-engine test). Prints one JSON summary line per pass.
Exit 0 done, 1 some deletions failed (--once), 2 bad arguments or root, 3 the L2 tree could not be listed or read.

Runs on the Python 3.9 of the Curvine runtime image (Rocky Linux 9): standard library only, no 3.10+ syntax.
"""

from __future__ import annotations

import argparse
import errno
import heapq
import json
import os
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GB = 1000**3
TMP_SUFFIX = ".tmp"
REASONS = ("stale_tmp", "unused", "lost", "expired", "over_budget")
# Read errors that mean "this file's data is gone" (curvine-fuse maps the master's lost-replica error to EIO).
LOST_ERRNOS = frozenset({errno.EIO, errno.ENODATA})
# ETIMEDOUT: a slow but live worker (curvine-fuse maps timeouts to it): skip the file this round.
SKIP_ERRNOS = frozenset({errno.ETIMEDOUT})
STATE_FILE = ".kvtier-janitor-state.json"  # in the root, never listed, counted or deleted
EXIT_OK, EXIT_DELETE_ERRORS, EXIT_USAGE, EXIT_CANNOT_LIST = 0, 1, 2, 3


class ListingError(Exception):
    """The L2 tree could not be listed or read: this pass deletes nothing."""


class Entry:
    """One listed file. Slots: a million of them must fit the container (docs/benchmarks.md)."""

    __slots__ = ("mtime", "path", "size")

    def __init__(self, path: str, size: int, mtime: float) -> None:
        self.path = path
        self.size = size
        self.mtime = mtime

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Entry) and (self.path, self.size, self.mtime) == (other.path, other.size, other.mtime)

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Entry({self.path!r}, {self.size}, {self.mtime})"

    @property
    def is_tmp(self) -> bool:
        return self.path.endswith(TMP_SUFFIX)


@dataclass
class Plan:
    """What one pass deletes, by reason, and what stays."""

    stale_tmp: list[Entry] = field(default_factory=list)
    unused: list[Entry] = field(default_factory=list)
    lost: list[Entry] = field(default_factory=list)
    expired: list[Entry] = field(default_factory=list)
    over_budget: list[Entry] = field(default_factory=list)
    kept: list[Entry] = field(default_factory=list)

    def by_reason(self) -> dict[str, list[Entry]]:
        return {reason: getattr(self, reason) for reason in REASONS}

    def deleted(self) -> list[Entry]:
        return [e for reason in REASONS for e in getattr(self, reason)]


def scan(root: str, directories: dict[str, float] | None = None) -> list[Entry]:
    """Every regular file under `root`, without following symlinks; files that vanish meanwhile are skipped. Any
    other error (ENOTCONN of a dead FUSE mount, EACCES, a timeout) raises ListingError. `directories`, when given,
    gets each subdirectory's mtime as listed (before this pass deletes anything in it)."""
    found: list[Entry] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as entries:
                for item in entries:
                    try:
                        if item.is_dir(follow_symlinks=False):
                            stack.append(item.path)
                            if directories is not None:
                                directories[item.path] = item.stat(follow_symlinks=False).st_mtime
                        elif item.name.startswith(STATE_FILE):
                            continue
                        elif item.is_file(follow_symlinks=False):
                            info = item.stat(follow_symlinks=False)
                            found.append(Entry(item.path, info.st_size, info.st_mtime))
                    except FileNotFoundError:
                        continue
        except FileNotFoundError:
            if directory == root:
                raise ListingError(f"{root} vanished") from None
            continue
        except OSError as err:
            raise ListingError(f"cannot list {directory}: {err}") from err
    return found


def under(root: str, path: str, directories: set[str]) -> bool:
    """Whether `path` lies in one of `directories` (relative to root)."""
    relative = os.path.relpath(path, root)
    return any(relative == d or relative.startswith(d + "/") for d in directories)


def read_probe(path: str, size: int) -> int:
    """Read the first and last byte of a file; 0 when both read (or the file is gone), else the errno."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.pread(fd, 1, 0)
            if size > 1:
                os.pread(fd, 1, size - 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return 0
    except OSError as err:
        return err.errno or errno.EIO
    return 0


def plan(
    entries: list[Entry],
    *,
    now: float,
    budget_bytes: int,
    max_age_s: float,
    tmp_max_age_s: float,
    target_fraction: float,
    root: str = "/",
    in_use: set[str] | None = None,
    unused_grace_s: float = 3600.0,
    lost: set[str] | None = None,
) -> Plan:
    """Choose deletions; pure, so tests can check it on any file set. `in_use` None: no unused-directory cleanup."""
    result = Plan()
    survivors: list[Entry] = []
    lost = lost or set()
    for entry in entries:
        age = now - entry.mtime
        if entry.is_tmp:
            # A young temporary file is a write in progress: it counts toward usage but is never a victim.
            (result.stale_tmp if age > tmp_max_age_s else result.kept).append(entry)
        elif in_use is not None and age > unused_grace_s and not under(root, entry.path, in_use):
            result.unused.append(entry)
        elif entry.path in lost:
            result.lost.append(entry)
        elif age > max_age_s:
            result.expired.append(entry)
        else:
            survivors.append(entry)
    used = sum(e.size for e in survivors) + sum(e.size for e in result.kept)
    if used > budget_bytes:
        target = budget_bytes * target_fraction
        survivors.sort(key=lambda e: (e.mtime, e.path))
        cut = 0
        while cut < len(survivors) and used > target:
            used -= survivors[cut].size
            cut += 1
        result.over_budget = survivors[:cut]
        survivors = survivors[cut:]
    result.kept.extend(survivors)
    return result


def usage_by_top_dir(root: str, entries: list[Entry]) -> dict[str, int]:
    """Bytes per first-level subdirectory (one per endpoint), for the log."""
    out: dict[str, int] = {}
    skip = len(root.rstrip("/")) + 1
    for entry in entries:
        relative = entry.path[skip:]
        top = relative.split("/", 1)[0] if "/" in relative else "."
        out[top] = out.get(top, 0) + entry.size
    return dict(sorted(out.items()))


def delete(entries: list[Entry]) -> tuple[list[Entry], list[str]]:
    """Unlink each file; a file already gone counts as deleted. Returns (deleted, errors)."""
    done: list[Entry] = []
    errors: list[str] = []
    for entry in entries:
        try:
            Path(entry.path).unlink()
            done.append(entry)
        except FileNotFoundError:
            done.append(entry)
        except OSError as err:
            errors.append(f"{entry.path}: {err}")
    return done, errors


def prune_unused_dirs(root: str, in_use: set[str], listed: dict[str, float], now: float, grace_s: float) -> list[str]:
    """Remove empty directories that neither are nor contain an in-use directory and whose mtime, as listed before
    this pass, is older than the grace period (an endpoint that starts creates its directory first; a directory made
    after the listing is not touched). Deepest first; returns what went, relative to root."""
    keep: set[str] = set()
    for directory in in_use:
        parts = directory.split("/")
        keep.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    removed: list[str] = []
    for path in sorted(listed, key=lambda p: p.count("/"), reverse=True):
        relative = os.path.relpath(path, root)
        if relative in keep or under(root, path, in_use) or now - listed[path] <= grace_s:
            continue
        try:
            Path(path).rmdir()
            removed.append(relative)
        except OSError:
            continue  # not empty (a young file stayed, or one arrived), or already gone
    return removed


# ---- Curvine master: lost workers ----------------------------------------------------------------------------------


def lost_workers(master_urls: list[str], timeout: float = 5.0) -> set[int] | None:
    """Worker ids the master reports lost (`GET /api/workers`, curvine-master router_handler.rs), from the master
    that knows the most live workers (the Raft leader; followers get no heartbeats). None when no master answers."""
    best: tuple[int, set[int]] | None = None
    for url in master_urls:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/api/workers", timeout=timeout) as response:
                body = json.loads(response.read().decode("utf-8"))
            live = [w["address"]["worker_id"] for w in body.get("live_workers", [])]
            lost = {int(w["address"]["worker_id"]) for w in body.get("lost_workers", [])}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if best is None or len(live) > best[0]:
            best = (len(live), lost)
    return None if best is None else best[1]


# ---- metrics -------------------------------------------------------------------------------------------------------


@dataclass
class Metrics:
    """What /metrics shows; names are a contract with the alert rules (docs/l2.md)."""

    lob: str
    budget_bytes: int
    used_bytes: int = 0
    last_success: float = 0.0
    deleted_files: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    deleted_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, deleted: dict[str, list[Entry]], used: int, now: float) -> None:
        with self.lock:
            for reason, entries in deleted.items():
                self.deleted_files[reason] += len(entries)
                self.deleted_bytes[reason] += sum(e.size for e in entries)
            self.used_bytes = used
            self.last_success = now

    def text(self) -> str:
        lob = _label(self.lob)
        with self.lock:
            lines = [
                "# HELP kvtier_l2_used_bytes Bytes in the LOB's L2 directory after the janitor's last pass.",
                "# TYPE kvtier_l2_used_bytes gauge",
                f'kvtier_l2_used_bytes{{lob="{lob}"}} {self.used_bytes}',
                "# HELP kvtier_l2_budget_bytes The LOB's L2 budget (l2.budget_gb).",
                "# TYPE kvtier_l2_budget_bytes gauge",
                f'kvtier_l2_budget_bytes{{lob="{lob}"}} {self.budget_bytes}',
                "# HELP kvtier_janitor_deleted_files_total Files the janitor deleted, by reason.",
                "# TYPE kvtier_janitor_deleted_files_total counter",
                *(
                    f'kvtier_janitor_deleted_files_total{{lob="{lob}",reason="{r}"}} {self.deleted_files[r]}'
                    for r in REASONS
                ),
                "# HELP kvtier_janitor_deleted_bytes_total Bytes the janitor deleted, by reason.",
                "# TYPE kvtier_janitor_deleted_bytes_total counter",
                *(
                    f'kvtier_janitor_deleted_bytes_total{{lob="{lob}",reason="{r}"}} {self.deleted_bytes[r]}'
                    for r in REASONS
                ),
                "# HELP kvtier_janitor_last_success_timestamp_seconds When the last complete pass ended.",
                "# TYPE kvtier_janitor_last_success_timestamp_seconds gauge",
                f'kvtier_janitor_last_success_timestamp_seconds{{lob="{lob}"}} {self.last_success:.3f}',
            ]
        return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def serve(metrics: Metrics, host: str, port: int, stale_after_s: float, started: float) -> ThreadingHTTPServer:
    """/metrics, and /healthz: 503 once no pass has succeeded for stale_after_s (a hung mount, a loop that died)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._reply(200, metrics.text(), "text/plain; version=0.0.4; charset=utf-8")
            elif self.path == "/healthz":
                last = metrics.last_success or started
                fresh = time.time() - last <= stale_after_s
                self._reply(200 if fresh else 503, "ok\n" if fresh else "no successful pass recently\n", "text/plain")
            else:
                self._reply(404, "not found\n", "text/plain")

        def _reply(self, status: int, body: str, content_type: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
            return  # scrapes every 30 s would drown the pass summaries

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


# ---- one pass and the loop -----------------------------------------------------------------------------------------


@dataclass
class Prober:
    """Lost-block probing, bounded per pass and resumable: when a round starts (a lost worker the master newly reports,
    or the fallback interval), where it stands, which files failed once (suspects), and which lost workers a finished
    round already covered. Kept in `state_path` across restarts (Curvine keeps a replaced node's worker id in
    `lost_workers` forever, so without it every restart would probe everything again)."""

    master_urls: list[str]
    interval_s: float
    forced: bool = False
    state_path: str | None = None
    max_files: int = 5000
    max_seconds: float = 10.0
    handled_lost: set[int] | None = None  # None: the master has not answered yet
    round_reason: str | None = None
    round_workers: list[int] = field(default_factory=list)
    cursor: str = ""
    suspects: dict[str, float] = field(default_factory=dict)
    last_probe: float = 0.0

    def load(self) -> None:
        if not self.state_path:
            return
        try:
            state = json.loads(Path(self.state_path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # first start, or an unreadable file: start afresh
        if not isinstance(state, dict):
            return
        handled = state.get("handled_lost")
        self.handled_lost = None if handled is None else {int(w) for w in handled}
        self.round_reason = state.get("round_reason")
        self.round_workers = [int(w) for w in state.get("round_workers", [])]
        self.cursor = str(state.get("cursor", ""))
        self.suspects = {str(k): float(v) for k, v in (state.get("suspects") or {}).items()}
        self.last_probe = float(state.get("last_probe", 0.0))

    def save(self) -> None:
        if not self.state_path:
            return
        state = {
            "handled_lost": None if self.handled_lost is None else sorted(self.handled_lost),
            "round_reason": self.round_reason,
            "round_workers": self.round_workers,
            "cursor": self.cursor,
            "suspects": self.suspects,
            "last_probe": self.last_probe,
        }
        new = self.state_path + ".new"
        try:
            Path(new).write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
            Path(new).replace(self.state_path)
        except OSError:
            pass  # a full or dead mount: the next pass tries again; nothing depends on it but efficiency

    def due(self, now: float) -> tuple[bool, str]:
        """Whether a new round starts now, and why (a round in progress carries on regardless)."""
        if self.round_reason is not None:
            return False, ""
        if self.last_probe == 0.0:
            self.last_probe = now  # the fallback timer starts with the first pass ever
        reason, workers = "", []
        if self.master_urls:
            lost = lost_workers(self.master_urls)
            if lost is not None:
                first = self.handled_lost is None
                new = sorted(lost - (self.handled_lost or set()))
                if new:
                    reason, workers = f"{'lost' if first else 'newly lost'} workers {new}", new
                elif first:
                    self.handled_lost = set()
        if not reason and self.forced:
            reason = "forced"
        if not reason and now - self.last_probe >= self.interval_s:
            reason = "interval"
        if not reason:
            return False, ""
        self.round_reason, self.round_workers, self.cursor = reason, workers, ""
        return True, reason

    def step(self, root: str, entries: list[Entry], now: float) -> tuple[list[Entry], dict[str, object]]:
        """One pass's share of probing: suspects first, then the round from its cursor, within max_files and
        max_seconds. Returns the files to delete (failed EIO on two passes) and a summary."""
        deadline = time.monotonic() + self.max_seconds
        budget = self.max_files
        skip = len(root.rstrip("/")) + 1
        by_relative = {e.path[skip:]: e for e in entries} if (self.suspects or self.round_reason) else {}
        condemned: list[Entry] = []
        summary: dict[str, object] = {"round": self.round_reason, "probed": 0, "skipped_timeout": 0}
        for relative in sorted(self.suspects):
            entry = by_relative.get(relative)
            if entry is None:
                del self.suspects[relative]  # gone, expired, or over budget meanwhile
                continue
            if budget <= 0 or time.monotonic() > deadline:
                break
            budget -= 1
            code = read_probe(entry.path, entry.size)
            if code in LOST_ERRNOS:
                condemned.append(entry)
                del self.suspects[relative]
            elif code == 0:
                del self.suspects[relative]  # it was transient
            elif code not in SKIP_ERRNOS:
                summary["error"] = f"cannot read {entry.path}: {os.strerror(code)}"
                return condemned, summary
        if self.round_reason is not None:
            pending = (r for r in by_relative if r > self.cursor)
            batch = heapq.nsmallest(max(budget, 0), pending)
            finished = len(batch) < max(budget, 0)
            for relative in batch:
                if time.monotonic() > deadline:
                    finished = False
                    break
                entry = by_relative[relative]
                code = read_probe(entry.path, entry.size)
                summary["probed"] = int(summary["probed"]) + 1  # type: ignore[call-overload]
                if code in LOST_ERRNOS:
                    self.suspects[relative] = now
                elif code in SKIP_ERRNOS:
                    summary["skipped_timeout"] = int(summary["skipped_timeout"]) + 1  # type: ignore[call-overload]
                elif code != 0:
                    summary["error"] = f"cannot read {entry.path}: {os.strerror(code)}"
                    return condemned, summary
                self.cursor = relative
            if finished:
                self.handled_lost = (self.handled_lost or set()) | set(self.round_workers)
                self.round_reason, self.round_workers, self.cursor = None, [], ""
                self.last_probe = now
                summary["round_finished"] = True
        summary["suspects"] = len(self.suspects)
        return condemned, summary


def one_pass(args: argparse.Namespace, root: str, metrics: Metrics, prober: Prober, now: float) -> dict[str, object]:
    listed_dirs: dict[str, float] = {}
    entries = scan(root, listed_dirs)
    in_use: set[str] | None = set(args.in_use) if args.delete_unused else None
    chosen = plan(
        entries,
        now=now,
        budget_bytes=metrics.budget_bytes,
        max_age_s=args.max_age_hours * 3600,
        tmp_max_age_s=args.tmp_max_age_minutes * 60,
        target_fraction=args.target_fraction,
        root=root,
        in_use=in_use,
        unused_grace_s=args.unused_grace_minutes * 60,
    )
    errors: list[str] = []
    done: dict[str, list[Entry]] = {r: [] for r in REASONS}
    pruned: list[str] = []
    if not args.dry_run:
        for reason, victims in chosen.by_reason().items():
            done[reason], failed = delete(victims)
            errors.extend(failed)
        if in_use is not None:
            pruned = prune_unused_dirs(root, in_use, listed_dirs, now, args.unused_grace_minutes * 60)
    kept = chosen.kept
    kept_bytes = sum(e.size for e in kept)
    metrics.record(done, kept_bytes, time.time())  # the budget is kept before any probing
    # Lost blocks last, bounded: finished files of the directories in use (the rest goes by age or as unused).
    prober.due(now)
    candidates = [e for e in kept if not e.is_tmp and (in_use is None or under(root, e.path, in_use))]
    condemned, probe = prober.step(root, candidates, now)
    chosen.lost = condemned
    if condemned and not args.dry_run:
        done_lost, failed = delete(condemned)
        errors.extend(failed)
        gone = {e.path for e in done_lost}
        kept = [e for e in kept if e.path not in gone]
        kept_bytes = sum(e.size for e in kept)
        metrics.record({"lost": done_lost}, kept_bytes, time.time())
    prober.save()
    return {
        "root": root,
        "lob": args.lob,
        "dry_run": args.dry_run,
        "files": len(entries),
        "bytes_before": sum(e.size for e in entries),
        **{f"deleted_{reason}": len(victims) for reason, victims in chosen.by_reason().items()},
        "bytes_deleted": sum(e.size for e in chosen.deleted()),
        "bytes_after": kept_bytes,
        "budget_bytes": metrics.budget_bytes,
        "bytes_by_dir": usage_by_top_dir(root, kept),
        "probe": probe,
        "pruned_dirs": sorted(pruned),
        "errors": errors[:20],
    }


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    """Pass after pass until `stop` is set (or once). Returns the exit code."""
    root = os.path.realpath(args.root)
    if root == "/" or not Path(root).is_dir():
        print(json.dumps({"error": f"{args.root} is not a directory the janitor may clean"}), file=sys.stderr)
        return EXIT_USAGE
    stop = stop or threading.Event()
    metrics = Metrics(args.lob, round(args.budget_gb * GB))
    prober = Prober(
        list(args.master_url),
        args.probe_interval_minutes * 60,
        forced=args.probe,
        state_path=None if args.dry_run or not args.keep_state else str(Path(root) / STATE_FILE),
        max_files=args.probe_max_files,
        max_seconds=args.probe_seconds,
    )
    prober.load()
    started = time.time()
    server = None
    if args.metrics_port is not None:
        stale = args.stale_after_seconds or 5 * args.interval_seconds + 60
        server = serve(metrics, args.metrics_host, args.metrics_port, stale, started)
    try:
        while True:
            now = time.time() if args.now is None else args.now
            try:
                summary = one_pass(args, root, metrics, prober, now)
            except ListingError as err:
                print(json.dumps({"error": f"nothing deleted: {err}", "lob": args.lob}), file=sys.stderr, flush=True)
                return EXIT_CANNOT_LIST
            print(json.dumps(summary, sort_keys=True), flush=True)
            if args.once:
                if isinstance(summary["probe"], dict) and summary["probe"].get("error"):
                    return EXIT_CANNOT_LIST  # the mount broke during the probe (the budget step ran)
                return EXIT_DELETE_ERRORS if summary["errors"] else EXIT_OK
            if stop.wait(args.interval_seconds):
                return EXIT_OK
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", help="the mounted L2 directory of one line of business")
    parser.add_argument("--lob", default="", help="the line of business (the metrics' lob label)")
    parser.add_argument("--budget-gb", type=float, required=True)
    parser.add_argument("--max-age-hours", type=float, required=True)
    parser.add_argument("--tmp-max-age-minutes", type=float, default=60.0)
    parser.add_argument("--target-fraction", type=float, default=0.9)
    parser.add_argument(
        "--in-use", action="append", default=[], help="<endpoint>/<identity> directory an endpoint uses"
    )
    parser.add_argument("--delete-unused", action="store_true", help="delete files outside every --in-use directory")
    parser.add_argument("--unused-grace-minutes", type=float, default=60.0)
    parser.add_argument("--master-url", action="append", default=[], help="Curvine master web URL (repeatable)")
    parser.add_argument("--probe-interval-minutes", type=float, default=60.0)
    parser.add_argument("--probe", action="store_true", help="start a lost-block probe round whenever none runs")
    parser.add_argument("--keep-state", action="store_true", help=f"keep the probe's state in <root>/{STATE_FILE}")
    parser.add_argument("--probe-max-files", type=int, default=5000, help="files probed per pass at most")
    parser.add_argument("--probe-seconds", type=float, default=10.0, help="probe time per pass at most")
    parser.add_argument("--interval-seconds", type=float, default=30.0)
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.add_argument("--metrics-port", type=int, default=None, help="serve /metrics and /healthz on this port")
    parser.add_argument("--metrics-host", default="0.0.0.0")
    parser.add_argument("--stale-after-seconds", type=float, default=None, help="default: 5 intervals + 60 s")
    parser.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    parser.add_argument("--now", type=float, default=None, help="epoch seconds (tests); default: the clock")
    args = parser.parse_args(argv)
    positive = ("budget_gb", "max_age_hours", "tmp_max_age_minutes", "interval_seconds", "probe_interval_minutes")
    if any(getattr(args, name) <= 0 for name in positive) or args.unused_grace_minutes < 0:
        parser.error(
            "--budget-gb, --max-age-hours, --tmp-max-age-minutes, --interval-seconds and --probe-interval-minutes "
            "must be positive, --unused-grace-minutes not negative"
        )
    if args.probe_max_files < 1 or args.probe_seconds <= 0:
        parser.error("--probe-max-files must be at least 1 and --probe-seconds positive")
    if not 0 < args.target_fraction <= 1:
        parser.error("--target-fraction must be in (0, 1]")
    for directory in args.in_use:
        parts = directory.split("/")
        if directory.startswith("/") or any(p in ("", ".", "..") for p in parts):
            parser.error(f"--in-use {directory!r} must be a relative path like <endpoint>/<identity>")
    return args


def main(argv: list[str]) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
