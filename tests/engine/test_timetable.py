"""The engine suite's time table (tests/engine/timetable.py), on a scratch suite run by a real pytest: a module whose
fixture starts a stand-in engine through the shared harness (it serves after a delay) and whose tests take time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.engine.timetable import ModuleTimes, module_of, table
from tests.support import ROOT

SERVE_AFTER_S = 1.5
SCRATCH = f"""
import time

import pytest

from tests.engine import fake_engine
from tests.engine.engines import Engines


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake")
    folder = fake_engine.server_folder(root, fake_engine.serving_after({SERVE_AFTER_S}))
    with Engines(fake_engine.PYTHON, root, "m", 60) as group:
        group.start([("x", fake_engine.launch(folder))])
        time.sleep(0.5)  # the scenario's own work
        yield


def test_slow(engine):
    time.sleep(1.0)


def test_fast(engine):
    pass


def test_without_engines():
    pass
"""
# A group two modules share (tests/engine/shared_groups.py), as tests/engine/conftest.py gives one to pytest.
SHARED_CONFTEST = f"""
import pytest

from tests.engine import fake_engine
from tests.engine.shared_groups import close_after_last_user, run_together, shared


@pytest.fixture(scope="session")
def fakes(tmp_path_factory):
    pids = tmp_path_factory.getbasetemp() / "pids"
    with shared("fakes", "fake group", lambda: fake_engine.start_group(
        tmp_path_factory.mktemp("group"), pids, {SERVE_AFTER_S}
    )) as group:
        yield group


def pytest_collection_modifyitems(items):
    items[:] = run_together(items, ("fakes",))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    close_after_last_user(item, nextitem)
"""
USES_THE_GROUP = """
import time


def test_phase(fakes):
    fakes.get()
    time.sleep(0.3)
"""


def _run(tmp_path: Path, files: dict[str, str] | None = None, **env: str) -> str:
    files = files or {"test_scratch.py": SCRATCH, "test_second.py": "def test_quick():\n    pass\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-p", "tests.engine.timetable", "-p", "no:cacheprovider", "-q"]
    argv += ["-c", os.devnull, "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "base"), str(tmp_path)]
    run = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ | {"PYTHONPATH": str(ROOT)} | env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _row(output: str, module: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith(f"| {module} "))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_table_splits_engine_waits_from_the_scenario_and_the_tests(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    output = _run(tmp_path, KVTIER_ENGINE_BENCH_DOC=str(doc))
    assert "engine suite: wall time per test module" in output
    _name, tests, engines, waiting, other, bodies, _teardown, total = _row(output, "test_scratch.py")
    assert (tests, engines) == ("3", "1")
    assert float(waiting) >= SERVE_AFTER_S - 0.5  # rounded to whole seconds
    assert float(other) <= float(waiting)  # the fixture's 0.5 s of own work, not the engine's wait again
    assert float(bodies) >= 1
    assert float(total) >= float(waiting) + float(bodies) - 1
    assert _row(output, "test_second.py")[1:3] == ["1", "0"]
    assert re.search(r"\| \*\*all\*\* \(\d+ s of pytest\) \| 4 \| 1 \|", output)
    text = doc.read_text(encoding="utf-8")
    assert "<!-- begin:engine-suite-times -->" in text and "| test_scratch.py | 3 | 1 |" in text


def test_without_the_doc_variable_nothing_is_written(tmp_path: Path) -> None:
    output = _run(tmp_path)
    assert _row(output, "test_scratch.py")[2] == "1"
    assert not (tmp_path / "benchmarks.md").exists()


def test_table_orders_by_time_and_marks_failures() -> None:
    slow, quick = ModuleTimes(tests=2, failed=1, engines=2), ModuleTimes(tests=1)
    slow.phases["setup"], slow.engine_wait["setup"], slow.phases["call"] = 50.0, 30.0, 5.0
    quick.phases["call"] = 1.0
    lines = table({"test_quick.py": quick, "test_slow.py": slow}, 60.0)
    assert lines[2] == "| test_slow.py | 2 (1 failed) | 2 | 30 | 20 | 5 | 0 | 55 |"
    assert lines[3] == "| test_quick.py | 1 | 0 | 0 | 0 | 1 | 0 | 1 |"
    assert lines[4] == "| **all** (60 s of pytest) | 3 | 2 | 30 | 20 | 6 | 0 | 56 |"
    assert module_of("tests/engine/test_x.py::test_y[a]") == "test_x.py"


def test_a_shared_group_gets_its_own_row_and_the_modules_keep_theirs(tmp_path: Path) -> None:
    """Two modules run as phases on one group: its start-up (engine and wait) is on the group's row, not on the row
    of the module that asked first; its stop is on the group's row too; every row adds up to pytest's total."""
    files = {"conftest.py": SHARED_CONFTEST, "test_one.py": USES_THE_GROUP, "test_two.py": USES_THE_GROUP}
    output = _run(tmp_path, files)
    _name, tests, engines, waiting, _other, _bodies, _teardown, total = _row(output, "fake group (shared)")
    assert (tests, engines) == ("-", "1")
    assert float(waiting) >= SERVE_AFTER_S - 0.5 and float(total) >= float(waiting)
    for module in ("test_one.py", "test_two.py"):
        _name, tests, engines, waiting, other, _bodies, _teardown, total = _row(output, module)
        assert (tests, engines, waiting) == ("1", "0", "0")
        assert float(other) < SERVE_AFTER_S - 0.5 and float(total) < SERVE_AFTER_S, output
    assert re.search(r"\| \*\*all\*\* \(\d+ s of pytest\) \| 2 \| 1 \|", output)
    assert len((tmp_path / "base" / "pids").read_text().split()) == 1  # started once for both
