"""The test server's own command line: a port it cannot take is one line and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kvtier.bench.testserver import FakeCluster, free_port, main, stop_process, wait_until_answering
from tests.support import ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtier.bench.testserver", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_a_port_in_use_is_one_line_and_exit_2() -> None:
    with FakeCluster(1) as old:  # an earlier test server, still running
        port = old.servers[0].port
        done = _run("--port", str(port))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"kvtier testserver: cannot listen on 127.0.0.1 port {port}: address already in use; stop what holds it "
        "(an earlier test server? `ss -ltnp` shows it) or pass another --port"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "argument --port: 70000 is not a TCP port; use 1 to 65535"),
        (["--port", "http"], "argument --port: 'http' is not a port number; use 1 to 65535"),
        (["--port", "8101", "--port", "8101"], "--port repeats a port (8101 8101); give each server its own"),
    ],
)
def test_a_bad_port_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"kvtier testserver: {message} (--help lists the options)"]


def test_a_cluster_that_cannot_start_leaves_nothing_running() -> None:
    with FakeCluster(1) as old:
        taken = old.servers[0].port
        before = threading.active_count()
        cluster = FakeCluster(2, ports=(0, taken))
        with pytest.raises(OSError), cluster:
            pass
        assert cluster.failed_port == taken
        assert threading.active_count() == before  # the loop's thread is stopped
        assert cluster.servers[0]._server is not None and not cluster.servers[0]._server.is_serving()


def test_wait_until_answering_names_an_exited_process_and_a_silent_one(tmp_path: Path) -> None:
    """The one wait for Prometheus and exporters that tests start: a dead process or a silent port is one line."""
    log = tmp_path / "log"
    log.write_text("boom: bad flag\n")
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait(timeout=30)
    with pytest.raises(RuntimeError, match=r"exporter exited with 3: boom: bad flag"):
        wait_until_answering(dead, f"http://127.0.0.1:{free_port()}/", log, "exporter")
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(RuntimeError, match=r"did not answer .* within 1 s"):
            wait_until_answering(silent, f"http://127.0.0.1:{free_port()}/", log, "exporter", timeout_s=1)
    finally:
        stop_process(silent)
