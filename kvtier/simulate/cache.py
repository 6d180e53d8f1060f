"""The cache tiers as sets of unit ids: per-replica LRU (L0 GPU, L1 CPU DRAM) and the shared L2 pool."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat


class LRU:
    """Least-recently-used set of units with a capacity in units (0 turns the tier off).

    `fits_all`: the capacity is at least every unit the trace can name (`Replay`'s `max_units`), so nothing is ever
    evicted and the order of use does not matter: the units are a plain set, about half the memory and time of the
    ordered dict an LRU needs (`order` is then the set's, not the order of use).
    """

    __slots__ = ("capacity", "entries", "evictions", "fits_all")

    def __init__(self, capacity: int, *, fits_all: bool = False) -> None:
        self.capacity = capacity
        self.fits_all = fits_all and capacity > 0
        self.entries: OrderedDict[int, None] | set[int] = set() if self.fits_all else OrderedDict()
        self.evictions = 0

    def __contains__(self, unit: int) -> bool:
        return unit in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def store(self, units: Sequence[int]) -> None:
        """Insert or refresh one request's units, last unit first, so the head of a prefix is evicted last.

        vLLM frees a finished request's blocks in reverse order for the same reason; with it, what a tier holds is
        always whole prefixes, and a prefix match that stops at the first missing unit loses nothing.
        """
        capacity = self.capacity
        if capacity <= 0:
            return
        entries = self.entries
        if isinstance(entries, set):  # fits_all
            entries.update(units)
            return
        move = entries.move_to_end
        for unit in reversed(units):
            if unit in entries:
                move(unit)
            else:
                entries[unit] = None
        excess = len(entries) - capacity
        if excess > 0:
            pop = entries.popitem
            for _ in repeat(None, excess):
                pop(False)  # the least recently used (positional: a keyword costs more than the pop)
            self.evictions += excess

    def order(self) -> list[int]:
        """Units from the next evicted to the last (for tests and debugging)."""
        return list(self.entries)


class SharedPool:
    """L2 as kvtier deploys it (kvtier/k8s/curvine/scripts/l2_janitor.py): LMCache's fs connector writes a file per
    chunk it stores, replacing one that exists, so a file's age is its last write (reads leave mtime alone). The
    LOB's janitor, every `sweep_every_s`, deletes files older than `max_age_s`, then, if the pool holds more than
    `capacity` units, the oldest files until it holds at most `target_fraction` of it. Between sweeps the pool may
    exceed its budget (Curvine evicts nothing itself). `sweep_every_s` 0 applies both rules at every write."""

    __slots__ = (
        "always",
        "capacity",
        "deleted",
        "files",
        "max_age_s",
        "next_sweep",
        "peak",
        "sweep_every_s",
        "target",
        "written",
    )

    def __init__(
        self, capacity: int, max_age_s: float | None = None, sweep_every_s: float = 0.0, target_fraction: float = 1.0
    ) -> None:
        self.capacity = capacity
        self.target = math.floor(capacity * target_fraction)
        self.max_age_s = max_age_s
        self.sweep_every_s = sweep_every_s
        self.next_sweep = sweep_every_s if sweep_every_s > 0 else math.inf
        # `advance(now)` has work only from `next_sweep` on, or at every call when sweeping continuously by age: a
        # replay asks these two before calling it (twice a request).
        self.always = sweep_every_s <= 0 and max_age_s is not None
        # unit -> (written at, writer replica); insertion order is write order because time never goes back.
        self.files: OrderedDict[int, tuple[float, int]] = OrderedDict()
        self.deleted = 0
        self.written = 0
        self.peak = 0  # most units held at once (before a sweep trims them)

    def __len__(self) -> int:
        return len(self.files)

    def get(self, unit: int) -> tuple[float, int] | None:
        return self.files.get(unit)

    def advance(self, now: float) -> None:
        """Run every janitor sweep due by `now` (TTL alone when sweeping continuously)."""
        if self.capacity <= 0:
            return
        if self.next_sweep <= now:
            self.sweep(self.next_sweep)
            period = self.sweep_every_s
            due = self.next_sweep + period
            if due <= now:
                # The later sweeps due see no new write and a pool within its budget (the first one trimmed it):
                # each only deletes by age, and the last deletes all the others would. Jumping to it keeps a long
                # quiet gap (a late timestamp, a tiny period) from costing one loop turn per period; computed, not
                # stepped, so no loop depends on the period being above the float spacing of `now`.
                periods = (now - due) / period
                last = min(due + math.floor(periods) * period, now) if math.isfinite(periods) else now
                self._expire(last)
                due = last + period
            # Below the float spacing of `now`, adding the period moves nothing: the next sweep is then the next
            # call's (the pool is swept at every event, which is what so short a period means).
            self.next_sweep = due if due > now else math.nextafter(now, math.inf)
        if self.sweep_every_s <= 0 and self.max_age_s is not None:
            self._expire(now)

    def sweep(self, now: float) -> None:
        self._expire(now)
        self._trim()

    def store(self, units: Sequence[int], replica: int, now: float) -> None:
        if self.capacity <= 0:
            return
        files = self.files
        stamp = (now, replica)
        move = files.move_to_end
        for unit in units:
            if unit in files:
                move(unit)  # rewritten: youngest again
            files[unit] = stamp
        self.written += len(units)
        self.peak = max(self.peak, len(files))
        if self.sweep_every_s <= 0:
            self._trim()

    def _expire(self, now: float) -> None:
        if self.max_age_s is None:
            return
        files = self.files
        limit = now - self.max_age_s
        while files:
            unit, (written, _) = next(iter(files.items()))
            if written >= limit:  # the janitor deletes what is strictly older than the max age
                break
            del files[unit]
            self.deleted += 1

    def _trim(self) -> None:
        if len(self.files) > self.capacity:
            excess = len(self.files) - self.target
            pop = self.files.popitem
            for _ in repeat(None, excess):
                pop(False)
            self.deleted += excess
