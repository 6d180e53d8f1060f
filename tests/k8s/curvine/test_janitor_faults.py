"""The L2 janitor on a real FUSE mount that fails like Curvine (tests/k8s/curvine/faultfs.py): the budget step runs
first and is never starved by probing, probing is bounded per pass and resumes (across restarts too), a slow worker
(ETIMEDOUT) skips a file, one transient EIO condemns nothing, and lost workers already handled are not probed again
after a restart."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvtier.k8s.curvine.scripts.l2_janitor import EXIT_OK, STATE_FILE, parse_args, run
from tests.k8s.curvine.faultfs import FaultFS, mount

KB = 1000


@pytest.fixture
def fuse(tmp_path: Path) -> Iterator[FaultFS]:
    with mount(tmp_path / "fuse") as fs:
        yield fs


def fill(root: Path, count: int, size: int = KB, age_s: float = 60.0, start: int = 0) -> list[Path]:
    paths = []
    for i in range(start, start + count):
        path = root / "ep" / "id" / f"{i:05d}.data"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\1" * size)
        mtime = time.time() - age_s - (count - i)  # older first
        os.utime(path, (mtime, mtime))
        paths.append(path)
    return paths


def once(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = run(parse_args([str(root), "--once", "--lob=retail", "--max-age-hours=24", "--keep-state", *args]))
    out, err = capsys.readouterr()
    return code, json.loads((out or err).strip().splitlines()[-1])


def data_files(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*.data")}


def test_the_budget_goes_first_even_when_every_read_times_out(
    fuse: FaultFS, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fuse.path
    fill(root, 40, size=10 * KB)  # 400 kB against a 200 kB budget
    fuse.set_fault("slow", delay_s=0.5)
    started = time.monotonic()
    code, summary = once(root, capsys, "--budget-gb=0.0002", "--probe", "--probe-seconds=1")
    elapsed = time.monotonic() - started
    assert code == EXIT_OK, summary
    assert summary["deleted_over_budget"] == 22 and summary["bytes_after"] <= 180 * KB
    assert summary["probe"]["skipped_timeout"] >= 1, "ETIMEDOUT skips the file, the pass goes on"
    assert summary["deleted_lost"] == 0
    assert elapsed < 5, f"probing is bounded per pass ({elapsed:.1f} s)"


def test_one_transient_eio_condemns_nothing_a_second_one_does(
    fuse: FaultFS, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fuse.path
    fill(root, 3)
    fuse.set_fault("lost", paths=["ep/id/00000.data", "ep/id/00001.data"])
    code, summary = once(root, capsys, "--budget-gb=1", "--probe")
    assert code == EXIT_OK and summary["deleted_lost"] == 0 and summary["probe"]["suspects"] == 2
    fuse.set_fault("lost", paths=["ep/id/00001.data"])  # 00000 was transient
    code, summary = once(root, capsys, "--budget-gb=1")
    assert code == EXIT_OK and summary["deleted_lost"] == 1
    assert data_files(root) == {"00000.data", "00002.data"}


def test_a_probe_round_is_bounded_and_resumes_after_a_restart(
    fuse: FaultFS, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fuse.path
    fill(root, 25)
    code, summary = once(root, capsys, "--budget-gb=1", "--probe", "--probe-max-files=10")
    assert summary["probe"]["probed"] == 10 and "round_finished" not in summary["probe"]
    state = json.loads((root / STATE_FILE).read_text())
    assert state["cursor"] == "ep/id/00009.data" and state["round_reason"] == "forced"
    # A new process (a restart) resumes where the last one stopped.
    code, summary = once(root, capsys, "--budget-gb=1", "--probe-max-files=10")
    assert summary["probe"]["probed"] == 10
    code, summary = once(root, capsys, "--budget-gb=1", "--probe-max-files=10")
    assert summary["probe"]["probed"] == 5 and summary["probe"]["round_finished"] is True
    assert code == EXIT_OK and len(data_files(root)) == 25


class _Master(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(
            {
                "live_workers": [{"address": {"worker_id": 1}}],
                "lost_workers": [{"address": {"worker_id": 7}}],  # a replaced node's id, kept forever
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
        return


def test_a_lost_worker_handled_once_is_not_probed_again_after_restarts(
    fuse: FaultFS, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fuse.path
    fill(root, 5)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Master)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    master = f"--master-url=http://127.0.0.1:{server.server_address[1]}"
    try:
        code, summary = once(root, capsys, "--budget-gb=1", master)
        assert summary["probe"]["round"] == "lost workers [7]" and summary["probe"]["round_finished"] is True
        for _ in range(3):  # restarts: the worker id is still listed lost, and handled
            code, summary = once(root, capsys, "--budget-gb=1", master)
            assert code == EXIT_OK and summary["probe"]["round"] is None and summary["probe"]["probed"] == 0
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
