"""A stand-in engine for the harness's own tests (`make test`, no engine venv): `Engines` runs `python -m
vllm.entrypoints.openai.api_server`, so a folder holding a module of that name, first on PYTHONPATH, is an engine it
starts, waits for and stops like a real one."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kvtier.bench.testserver import free_port
from tests.engine import render
from tests.engine.engines import Engines

PYTHON = sys.executable  # the stand-in needs nothing but the standard library


def serving_after(delay_s: float, model: str = "m") -> str:
    """A server that lists `model` at GET /v1/models after `delay_s`, on the port its `--port` names, until stopped."""
    return f"""
import http.server, json, sys, time
time.sleep({delay_s})
class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"data": [{{"id": {model!r}}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Models).serve_forever()
"""


def server_folder(root: Path, body: str) -> Path:
    """`root` holding the server module with `body` (to put on PYTHONPATH)."""
    package = root / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True, exist_ok=True)
    (package / "api_server.py").write_text(body, encoding="utf-8")
    return root


def launch(folder: Path, name: str = "fake") -> render.Launch:
    """A launch of the server in `folder` on a free port."""
    return render.Launch(name, ("--port", str(free_port())), {"PYTHONPATH": str(folder)}, {}, None)


@dataclass
class FakeGroup:
    """A shared group (shared_groups.Group) of one stand-in engine; its PID is appended to `pids` when it starts."""

    harness: Engines
    spoiled: str | None = None

    def stop(self) -> None:
        self.harness.stop_all()


def start_group(root: Path, pids: Path, delay_s: float = 0.0) -> FakeGroup:
    folder = server_folder(root, serving_after(delay_s))
    harness = Engines(PYTHON, root, "m", 60)
    (engine,) = harness.start([("g", launch(folder))])
    assert engine.proc is not None
    with pids.open("a", encoding="utf-8") as out:
        out.write(f"{engine.proc.pid}\n")
    return FakeGroup(harness)
