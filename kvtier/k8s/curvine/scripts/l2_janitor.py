#!/usr/bin/env python3
"""kvtier L2 janitor: keeps one line of business's L2 directory within its age and size budget.

Neither LMCache's fs connector nor Curvine (v0.4.1, defaults) evicts anything, so this runs as a CronJob that mounts
the LOB's L2 volume. One pass, in this order:
  1. stale temporary files: `*.tmp` not modified for --tmp-max-age-minutes (LMCache writes `<file>.tmp`, then renames;
     an interrupted write leaves the temporary file behind);
  2. files not modified for --max-age-hours;
  3. if the directory still holds more than --budget-gb, the least recently written files until it holds at most
     --target-fraction of the budget (hysteresis, so the next pass does not start at the edge).
Every endpoint subdirectory is walked; directories, symlinks and other non-regular files are never deleted. Reads do
not change mtime, so "oldest" means oldest written. --budget-gb is decimal GB (10^9 bytes), as the LOB's l2.budget_gb.

Runs on the Python 3.9 of the Curvine runtime image (Rocky Linux 9): standard library only, no 3.10+ syntax.
Prints one JSON summary line. Exit 0 done, 1 some deletions failed, 2 bad arguments or root.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

GB = 1000**3
TMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    mtime: float

    @property
    def is_tmp(self) -> bool:
        return self.path.endswith(TMP_SUFFIX)


@dataclass
class Plan:
    """What one pass deletes, by reason, and what stays."""

    stale_tmp: list[Entry] = field(default_factory=list)
    expired: list[Entry] = field(default_factory=list)
    over_budget: list[Entry] = field(default_factory=list)
    kept: list[Entry] = field(default_factory=list)

    def deleted(self) -> list[Entry]:
        return self.stale_tmp + self.expired + self.over_budget


def scan(root: str) -> list[Entry]:
    """Every regular file under `root`, without following symlinks; files that vanish meanwhile are skipped."""
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
                        elif item.is_file(follow_symlinks=False):
                            info = item.stat(follow_symlinks=False)
                            found.append(Entry(item.path, info.st_size, info.st_mtime))
                    except FileNotFoundError:
                        continue
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


def plan(
    entries: list[Entry],
    *,
    now: float,
    budget_bytes: int,
    max_age_s: float,
    tmp_max_age_s: float,
    target_fraction: float,
) -> Plan:
    """Choose deletions; pure, so tests can check it on any file set."""
    result = Plan()
    survivors: list[Entry] = []
    for entry in entries:
        age = now - entry.mtime
        if entry.is_tmp:
            # A young temporary file is a write in progress: it counts toward usage but is never a budget victim.
            (result.stale_tmp if age > tmp_max_age_s else result.kept).append(entry)
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
    for entry in entries:
        relative = Path(entry.path).relative_to(root)
        top = relative.parts[0] if len(relative.parts) > 1 else "."
        out[top] = out.get(top, 0) + entry.size
    return dict(sorted(out.items()))


def delete(entries: list[Entry]) -> tuple[int, list[str]]:
    """Unlink each file; a file already gone counts as deleted. Returns (deleted, errors)."""
    done = 0
    errors: list[str] = []
    for entry in entries:
        try:
            Path(entry.path).unlink()
            done += 1
        except FileNotFoundError:
            done += 1
        except OSError as err:
            errors.append(f"{entry.path}: {err}")
    return done, errors


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("root", help="the mounted L2 directory of one line of business")
    parser.add_argument("--budget-gb", type=float, required=True)
    parser.add_argument("--max-age-hours", type=float, required=True)
    parser.add_argument("--tmp-max-age-minutes", type=float, default=60.0)
    parser.add_argument("--target-fraction", type=float, default=0.9)
    parser.add_argument("--dry-run", action="store_true", help="report what would be deleted, delete nothing")
    parser.add_argument("--now", type=float, default=None, help="epoch seconds (tests); default: the clock")
    args = parser.parse_args(argv)
    if args.budget_gb <= 0 or args.max_age_hours <= 0 or args.tmp_max_age_minutes <= 0:
        parser.error("--budget-gb, --max-age-hours and --tmp-max-age-minutes must be positive")
    if not 0 < args.target_fraction <= 1:
        parser.error("--target-fraction must be in (0, 1]")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    root = os.path.realpath(args.root)
    if root == "/" or not Path(root).is_dir():
        print(json.dumps({"error": f"{args.root} is not a directory the janitor may clean"}), file=sys.stderr)
        return 2
    now = time.time() if args.now is None else args.now
    entries = scan(root)
    chosen = plan(
        entries,
        now=now,
        budget_bytes=round(args.budget_gb * GB),
        max_age_s=args.max_age_hours * 3600,
        tmp_max_age_s=args.tmp_max_age_minutes * 60,
        target_fraction=args.target_fraction,
    )
    errors: list[str] = []
    if not args.dry_run:
        _, errors = delete(chosen.deleted())
    summary = {
        "root": root,
        "dry_run": args.dry_run,
        "files": len(entries),
        "bytes_before": sum(e.size for e in entries),
        "deleted_stale_tmp": len(chosen.stale_tmp),
        "deleted_expired": len(chosen.expired),
        "deleted_over_budget": len(chosen.over_budget),
        "bytes_deleted": sum(e.size for e in chosen.deleted()),
        "bytes_after": sum(e.size for e in chosen.kept),
        "budget_bytes": round(args.budget_gb * GB),
        "bytes_by_dir": usage_by_top_dir(root, chosen.kept),
        "errors": errors[:20],
    }
    print(json.dumps(summary, sort_keys=True))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
