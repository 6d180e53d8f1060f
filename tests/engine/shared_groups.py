"""Engine groups a test session shares (issue 40): a group's engines start once, on first use, and every scenario that
needs exactly that rendering runs as a phase on them instead of starting engines of its own.

`SharedGroup` is the session's handle on one group: `get()` starts it the first time and hands the running group to
each phase after; a phase that leaves the engines unfit for the next (signals' dead L2 mount) marks the group
spoiled, and the next `get()` stops those engines and starts new ones. `close()` stops them for good; it is safe to
call twice. A group (lmcache_replicas.py) owns an `Engines` harness, so its engines are stopped by process group.

For pytest (tests/engine/conftest.py): `shared(fixture, ...)` is the body of a session fixture; `run_together`
orders the collected tests so that the users of one group (the tests whose fixtures include its fixture) run one
after another, from where the first of them was collected; `close_after_last_user` closes a group right after the
last of them, so it never sits idle beside other modules' engines. While a group is open, SIGTERM raises
KeyboardInterrupt, so pytest's teardown stops its engines on that path too, as on a failure or Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

from tests.engine.engines import sigterm_interrupts


class Group(Protocol):
    spoiled: str | None  # why the group's engines cannot serve the next phase (None: they can)

    def stop(self) -> None: ...


G = TypeVar("G", bound=Group)


class SharedGroup(Generic[G]):
    def __init__(self, name: str, start: Callable[[], G]) -> None:
        self.name = name
        self.starts = 0
        self._start_group = start
        self._running: G | None = None

    def get(self) -> G:
        """The running group: started now if it never ran, or if a phase spoiled it."""
        if self._running is not None and self._running.spoiled is not None:
            self.close()
        if self._running is None:
            self._running = self._start()
        return self._running

    def close(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            self._stop(running)

    # The timetable (tests/engine/timetable.py) wraps these two to put their time on the group's own row.
    def _start(self) -> G:
        self.starts += 1
        return self._start_group()

    def _stop(self, group: G) -> None:
        group.stop()


open_groups: dict[str, SharedGroup[Any]] = {}  # fixture name -> its group, while the session fixture holds it


@contextmanager
def shared(fixture: str, name: str, start: Callable[[], G]) -> Iterator[SharedGroup[G]]:
    """A session fixture's body: the group, closed (engines stopped) on the way out, whatever happened."""
    group = SharedGroup(name, start)
    with sigterm_interrupts():
        open_groups[fixture] = group
        try:
            yield group
        finally:
            open_groups.pop(fixture, None)
            group.close()


def _uses(item: Any, fixture: str) -> bool:
    return item is not None and fixture in getattr(item, "fixturenames", ())


def run_together(items: Sequence[Any], fixtures: Sequence[str]) -> list[Any]:
    """`items` with each group's users moved behind the first of them; every other order as it was."""
    first: dict[str, int] = {}
    slot: list[int] = []
    for index, item in enumerate(items):
        used = [f for f in fixtures if _uses(item, f)]
        slot.append(first.setdefault(used[0], index) if used else index)
    return [items[i] for i in sorted(range(len(items)), key=lambda i: (slot[i], i))]


def close_after_last_user(item: Any, nextitem: Any) -> None:
    """Close each open group that `item` used and `nextitem` (None at the end) does not."""
    for fixture, group in list(open_groups.items()):
        if _uses(item, fixture) and not _uses(nextitem, fixture):
            group.close()
