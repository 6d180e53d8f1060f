"""A pytest plugin for the engine suite: each test module's wall time, split into waiting for engines to serve, the
rest of its set-up (the scenario its module fixture runs), its test bodies and its teardown, printed as one table at
the end of the run (`make test-engine` loads it with `-p tests.engine.timetable`).

It needs nothing from the modules it times: phases come from pytest's own reports, and engine start-ups from the
harness every scenario starts engines with (`tests.engine.engines.Engines.launch` and `.wait`, wrapped while the
session runs). A group of engines the session shares (tests/engine/shared_groups.py) gets a row of its own: the
time its start and stop took (model build and engine waits included) is moved out of the row of the module that
happened to ask first or last, so each module's row is its own scenario, a phase on the group. With
KVTIER_ENGINE_BENCH_DOC set (the Makefile sets it) the table is also written to that file's `engine-suite-times`
section.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

DOC_KEY = "engine-suite-times"
PHASES = ("setup", "call", "teardown")


@dataclass
class ModuleTimes:
    """One test module's wall seconds per phase, the engines it started and the seconds spent waiting for them."""

    tests: int = 0
    failed: int = 0
    skipped: int = 0
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    engines: int = 0
    engine_wait: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    carved: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))  # on a shared group's row
    shared: bool = False  # a shared group's row: its start-ups (set-up) and stops (teardown), no tests

    @property
    def total_s(self) -> float:
        return sum(self.phases.values()) - sum(self.carved.values())

    @property
    def startup_s(self) -> float:
        return sum(self.engine_wait.values())

    def _own(self, phase: str) -> float:
        return max(self.phases[phase] - self.engine_wait[phase] - self.carved[phase], 0.0)

    def other_setup_s(self) -> float:
        """Set-up without the engine waits in it: the scenario's own work (requests, probes, fault injection)."""
        return self._own("setup")

    def calls_s(self) -> float:
        return self._own("call")

    def teardown_s(self) -> float:
        return self._own("teardown")


def shared_row(name: str) -> str:
    return f"{name} (shared)"


def module_of(nodeid: str) -> str:
    """`tests/engine/test_x.py::test_y[a]` -> `test_x.py`."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


class TimeTable:
    def __init__(self) -> None:
        self.modules: dict[str, ModuleTimes] = {}
        self.module = ""  # the module of the test running now
        self.phase = "setup"
        self.carving: tuple[str, str] | None = None  # (shared group's row, its phase) while it starts or stops
        self.started = time.monotonic()
        self._restore: list[Callable[[], None]] = []

    # ---- engine start-ups, from the shared harness ------------------------------------------------------------------
    def wrap_engines(self) -> None:
        """Count what `Engines.launch` starts and time `Engines.wait`, for whichever module is running."""
        try:
            from tests.engine import engines
            from tests.engine.render import Launch
        except ImportError:  # a run without the harness has no engines to time
            return
        group = engines.Engines
        launch, wait = group.launch, group.wait

        def counted_launch(this: engines.Engines, launches: list[tuple[str, Launch]]) -> list[engines.Engine]:
            started = launch(this, launches)
            self.current().engines += len(started)
            return started

        def timed_wait(this: engines.Engines, started: list[engines.Engine]) -> list[engines.Engine]:
            begun = time.monotonic()
            try:
                return wait(this, started)
            finally:
                phase = self.carving[1] if self.carving else self.phase
                self.current().engine_wait[phase] += time.monotonic() - begun

        group.launch = counted_launch  # type: ignore[method-assign,assignment]
        group.wait = timed_wait  # type: ignore[method-assign,assignment]

        def restore() -> None:
            group.launch = launch  # type: ignore[method-assign]
            group.wait = wait  # type: ignore[method-assign]

        self._restore.append(restore)

    def wrap_shared_groups(self) -> None:
        """Put a shared group's start (set-up) and stop (teardown) on its own row, out of the asking module's."""
        try:
            from tests.engine.shared_groups import SharedGroup
        except ImportError:
            return
        start, stop = SharedGroup._start, SharedGroup._stop

        def timed_start(this: SharedGroup[Any]) -> Any:
            with self.carve(shared_row(this.name), "setup"):
                return start(this)

        def timed_stop(this: SharedGroup[Any], group: Any) -> None:
            with self.carve(shared_row(this.name), "teardown"):
                stop(this, group)

        SharedGroup._start = timed_start  # type: ignore[method-assign,assignment]
        SharedGroup._stop = timed_stop  # type: ignore[method-assign,assignment]

        def restore() -> None:
            SharedGroup._start = start  # type: ignore[method-assign]
            SharedGroup._stop = stop  # type: ignore[method-assign]

        self._restore.append(restore)

    @contextmanager
    def carve(self, row: str, phase: str) -> Iterator[None]:
        """Time spent inside goes to `row`'s `phase` (engines launched and waited for too), and out of the module
        running now (its pytest report still counts it)."""
        module, ran_in = self.module, self.phase
        self.carving = (row, phase)
        self.module = row
        shared = self.current()
        shared.shared = True
        begun = time.monotonic()
        try:
            yield
        finally:
            elapsed = time.monotonic() - begun
            self.carving, self.module = None, module
            shared.phases[phase] += elapsed
            self.current().carved[ran_in] += elapsed

    def unwrap(self) -> None:
        while self._restore:
            self._restore.pop()()

    def current(self) -> ModuleTimes:
        return self.modules.setdefault(self.module, ModuleTimes())

    # ---- pytest hooks ---------------------------------------------------------------------------------------------
    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.module = module_of(nodeid)
        self.phase = "setup"
        self.current()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self) -> Iterator[None]:
        self.phase = "call"
        yield
        self.phase = "teardown"

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        times = self.modules.setdefault(module_of(report.nodeid), ModuleTimes())
        times.phases[report.when] += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            times.tests += 1
            times.failed += report.failed
            times.skipped += report.skipped
        elif report.when == "teardown" and report.failed:
            times.failed += 1

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.modules:
            return
        wall = time.monotonic() - self.started
        terminalreporter.write_sep("=", "engine suite: wall time per test module (tests/engine/timetable.py)")
        for line in table(self.modules, wall):
            terminalreporter.write_line(line)
        doc = os.environ.get("KVTIER_ENGINE_BENCH_DOC")
        if doc:
            write_doc(Path(doc), self.modules, wall)


def table(modules: dict[str, ModuleTimes], wall_s: float) -> list[str]:
    """A Markdown table, slowest module first, with a total row."""
    rows = sorted(modules.items(), key=lambda item: -item[1].total_s)
    lines = [
        "| module | tests | engines started | waiting for engines s | other set-up s | test bodies s | teardown s "
        "| module s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, times in rows:
        outcome = f"{times.tests}" + (f" ({times.failed} failed)" if times.failed else "")
        outcome += f" ({times.skipped} skipped)" if times.skipped else ""
        outcome = "-" if times.shared else outcome
        lines.append(
            f"| {name} | {outcome} | {times.engines} | {times.startup_s:.0f} | {times.other_setup_s():.0f} | "
            f"{times.calls_s():.0f} | {times.teardown_s():.0f} | {times.total_s:.0f} |"
        )
    total = ModuleTimes()
    for times in modules.values():
        total.tests += times.tests
        total.engines += times.engines
        for phase in PHASES:
            total.phases[phase] += times.phases[phase]
            total.engine_wait[phase] += times.engine_wait[phase]
            total.carved[phase] += times.carved[phase]
    lines.append(
        f"| **all** ({wall_s:.0f} s of pytest) | {total.tests} | {total.engines} | {total.startup_s:.0f} | "
        f"{total.other_setup_s():.0f} | {total.calls_s():.0f} | {total.teardown_s():.0f} | {total.total_s:.0f} |"
    )
    return lines


def write_doc(path: Path, modules: dict[str, ModuleTimes], wall_s: float) -> None:
    from tools.benchdoc import write_section

    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    body = [
        "## Engine suite time per module (`make test-engine`)",
        "",
        f"Wall seconds of each test module of the last `make test-engine` on this machine ({stamp}, "
        f"{os.cpu_count()} CPUs, load average at the end {load}), from tests/engine/timetable.py: waiting for "
        "engines to serve (`Engines.wait`), the rest of the set-up (the scenario a module fixture runs, stopping its "
        "engines included), the test bodies and the fixtures' teardown. A row marked (shared) is a group of engines "
        "several modules run on as phases (tests/engine/shared_groups.py): its start (model build included) and its "
        "stop, taken out of the rows of the modules that asked.",
        "",
        *table(modules, wall_s),
    ]
    write_section(path, DOC_KEY, "\n".join(body) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    timetable = TimeTable()
    timetable.wrap_engines()
    timetable.wrap_shared_groups()
    config.pluginmanager.register(timetable, "kvtier-timetable")
    config.add_cleanup(timetable.unwrap)
