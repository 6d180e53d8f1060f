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
SCRATCH = f'''
import sys, time
from pathlib import Path

import pytest

from kvtier.bench.testserver import free_port
from tests.engine import render
from tests.engine.engines import Engines

SERVER = """
import http.server, json, sys, time
time.sleep({SERVE_AFTER_S})
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"data": [{{"id": "m"}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Models).serve_forever()
"""


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root = tmp_path_factory.mktemp("fake")
    package = root / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    (package / "api_server.py").write_text(SERVER)
    launch = render.Launch("fake", ("--port", str(free_port())), {{"PYTHONPATH": str(root)}}, {{}}, None)
    with Engines(sys.executable, root, "m", 60) as group:
        group.start([("x", launch)])
        time.sleep(0.5)  # the scenario's own work
        yield


def test_slow(engine):
    time.sleep(1.0)


def test_fast(engine):
    pass


def test_without_engines():
    pass
'''


def _run(tmp_path: Path, **env: str) -> str:
    (tmp_path / "test_scratch.py").write_text(SCRATCH, encoding="utf-8")
    (tmp_path / "test_second.py").write_text("def test_quick():\n    pass\n", encoding="utf-8")
    argv = [sys.executable, "-m", "pytest", "-p", "tests.engine.timetable", "-p", "no:cacheprovider", "-q"]
    argv += ["-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)]
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
