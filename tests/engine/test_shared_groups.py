"""Engine groups a session shares (tests/engine/shared_groups.py), without an engine (`make test`): one start for all
its users, which run one after another; a spoiled group is replaced; its engines are stopped by PID after the last
user, at the end of the session, and on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.engine import shared_groups
from tests.engine.engines import group_alive
from tests.engine.shared_groups import SharedGroup, close_after_last_user, run_together, shared
from tests.engine.test_timetable import SHARED_CONFTEST, USES_THE_GROUP
from tests.support import ROOT


@dataclass
class Item:
    name: str
    fixturenames: tuple[str, ...] = ()


@dataclass
class Stub:
    number: int
    stopped: list[int] = field(default_factory=list)
    spoiled: str | None = None

    def stop(self) -> None:
        self.stopped.append(self.number)


def _stubs() -> tuple[SharedGroup[Stub], list[int]]:
    stopped: list[int] = []
    count = iter(range(1, 100))
    return SharedGroup("stubs", lambda: Stub(next(count), stopped)), stopped


def test_users_of_a_group_run_together_from_the_first_of_them() -> None:
    items = [Item("a"), Item("b", ("g",)), Item("c"), Item("d", ("h",)), Item("e", ("g",)), Item("f", ("h",))]
    assert [i.name for i in run_together(items, ("g", "h"))] == ["a", "b", "e", "c", "d", "f"]
    assert run_together(items, ()) == items


def test_a_group_starts_once_is_replaced_when_spoiled_and_closes_once() -> None:
    group, stopped = _stubs()
    first = group.get()
    assert group.get() is first and group.starts == 1
    first.spoiled = "its mount died"
    second = group.get()
    assert second.number == 2 and stopped == [1] and group.starts == 2
    group.close()
    group.close()
    assert stopped == [1, 2]


def test_a_group_closes_after_its_last_user_and_never_starts_for_a_fixture_alone() -> None:
    with shared("g", "stubs", lambda: Stub(1)) as group:
        assert shared_groups.open_groups == {"g": group} and group.starts == 0
        running = group.get()
        close_after_last_user(Item("b", ("g",)), Item("c", ("g",)))
        assert running.stopped == []
        close_after_last_user(Item("c", ("g",)), Item("d"))
        assert running.stopped == [1]
    assert shared_groups.open_groups == {} and running.stopped == [1]


def _scratch(tmp_path: Path, files: dict[str, str]) -> subprocess.Popen[str]:
    for name, text in {"conftest.py": SHARED_CONFTEST, **files}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-c", os.devnull]
    argv += ["--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "base"), str(tmp_path)]
    return subprocess.Popen(
        argv, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True
    )


def _pids(tmp_path: Path) -> list[int]:
    return [int(p) for p in (tmp_path / "base" / "pids").read_text().split()]


CHECKS_THE_GROUP_STOPPED = """
from pathlib import Path

from tests.engine.engines import group_alive


def test_between(tmp_path_factory):
    pids = (tmp_path_factory.getbasetemp() / "pids").read_text().split()
    assert pids and not any(group_alive(int(p)) for p in pids), "the group outlived its last user"
"""


def test_the_users_run_together_and_the_group_stops_before_the_next_module(tmp_path: Path) -> None:
    files = {"test_a.py": USES_THE_GROUP, "test_b.py": CHECKS_THE_GROUP_STOPPED, "test_c.py": USES_THE_GROUP}
    run = _scratch(tmp_path, files)
    output, _ = run.communicate(timeout=120)
    assert run.returncode == 0, output
    order = [
        line.split("::")[0].rsplit("/", 1)[-1] for line in output.splitlines() if "::test_" in line and "PASSED" in line
    ]
    assert order == ["test_a.py", "test_c.py", "test_b.py"], output
    assert len(_pids(tmp_path)) == 1


SIGTERM_INSIDE = """
import os, signal, time


def test_terminated(fakes):
    fakes.get()
    os.kill(os.getpid(), signal.SIGTERM)  # what CI's timeout sends
    time.sleep(60)
"""


def test_sigterm_stops_the_group_by_pid(tmp_path: Path) -> None:
    run = _scratch(tmp_path, {"test_term.py": SIGTERM_INSIDE})
    output, _ = run.communicate(timeout=120)
    [pid] = _pids(tmp_path)
    alive = group_alive(pid)
    if alive:  # this test's own leftover: stop it before failing
        os.killpg(pid, signal.SIGKILL)
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output
    assert not alive, f"the group's engine {pid} outlived SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # nothing of the run's handler leaked here
