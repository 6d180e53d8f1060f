"""The L2 janitor as a loop: unused identity directories, lost blocks, failed listings, metrics, and the budget under a
live writer, all on real temporary trees (the script imported from the package, exactly as the ConfigMap ships it)."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtier.k8s.curvine.scripts import l2_janitor
from kvtier.k8s.curvine.scripts.l2_janitor import EXIT_CANNOT_LIST, EXIT_OK, Metrics, Prober, parse_args, run, serve

HOUR = 3600.0
KB = 1000
MB = 1000**2


def write(root: Path, relative: str, size: int, age_s: float) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\1" * size)
    mtime = time.time() - age_s
    os.utime(path, (mtime, mtime))
    return path


def usage(root: Path) -> int:
    """Bytes of finished files under root, tolerating files the janitor deletes while we look."""
    total = 0
    for path in root.rglob("*.data"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def once(root: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = run(parse_args([str(root), "--once", "--lob=retail", *args]))
    out, err = capsys.readouterr()
    lines = (out or err).strip().splitlines()
    return code, json.loads(lines[-1])


def test_unused_identity_directories_and_removed_endpoints_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "l2"
    write(root, "qwen3-8b/id-new/a.data", MB, 2 * HOUR)  # the current identity
    write(root, "qwen3-8b/id-old/b.data", MB, 2 * HOUR)  # the model changed: a new identity directory
    write(root, "qwen3-8b/id-old/deep/c.data", MB, 3 * HOUR)
    write(root, "gone-endpoint/id/d.data", MB, 5 * HOUR)  # an endpoint removed from the LOB
    write(root, "starting/id/e.data", MB, 60)  # unknown but younger than the grace period: kept
    write(root, "qwen3-8b/id-old/f.data.tmp", MB, 60)  # a write in progress, even in an unused directory
    for directory in ("qwen3-8b/id-old/deep", "qwen3-8b/id-old", "gone-endpoint/id", "gone-endpoint"):
        os.utime(root / directory, (time.time() - 2 * HOUR, time.time() - 2 * HOUR))
    code, summary = once(
        root, "--budget-gb=1", "--max-age-hours=24", "--delete-unused", "--in-use=qwen3-8b/id-new", capsys=capsys
    )
    assert code == EXIT_OK, summary
    assert files(root) == {"qwen3-8b/id-new/a.data", "starting/id/e.data", "qwen3-8b/id-old/f.data.tmp"}
    assert summary["deleted_unused"] == 3
    # Emptied directories go once they are older than the grace period; ones that hold a young file stay.
    assert not (root / "gone-endpoint").exists()
    assert (root / "qwen3-8b" / "id-old").is_dir()  # still holds the in-flight temp file
    assert (root / "qwen3-8b" / "id-new").is_dir()


def test_without_delete_unused_other_directories_are_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "l2"
    write(root, "ep/old-identity/a.data", MB, 2 * HOUR)
    code, summary = once(root, "--budget-gb=1", "--max-age-hours=24", capsys=capsys)
    assert code == EXIT_OK
    assert files(root) == {"ep/old-identity/a.data"}
    assert summary["deleted_unused"] == 0


@contextmanager
def failing_reads(monkeypatch: pytest.MonkeyPatch, paths: dict[str, int]) -> Iterator[None]:
    """os.pread raises `errno` for the named files, as curvine-fuse does for a block whose replicas are gone (EIO)
    or a dead mount (ENOTCONN); every other file reads for real."""
    real_open, real_pread = os.open, os.pread
    names: dict[int, str] = {}

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        names[fd] = os.fspath(path)
        return fd

    def fake_pread(fd: int, size: int, offset: int) -> bytes:
        failure = paths.get(names.get(fd, ""))
        if failure is not None:
            raise OSError(failure, os.strerror(failure))
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "pread", fake_pread)
    try:
        yield
    finally:
        monkeypatch.undo()


def test_files_whose_blocks_are_lost_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "l2"
    good = write(root, "ep/id/good.data", 3 * KB, 60)
    lost = write(root, "ep/id/lost.data", 3 * KB, 60)
    with failing_reads(monkeypatch, {str(lost): errno.EIO}):
        code, summary = once(root, "--budget-gb=1", "--max-age-hours=24", "--probe", "--keep-state", capsys=capsys)
        assert code == EXIT_OK and summary["deleted_lost"] == 0, "one EIO makes a suspect, not a victim"
        assert summary["probe"]["suspects"] == 1
        code, summary = once(root, "--budget-gb=1", "--max-age-hours=24", "--probe", "--keep-state", capsys=capsys)
    assert code == EXIT_OK, summary
    assert summary["deleted_lost"] == 1
    (root / l2_janitor.STATE_FILE).unlink()
    assert files(root) == {"ep/id/good.data"}
    assert good.exists()


def test_a_mount_that_dies_during_the_probe_stops_it_after_the_budget_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "l2"
    write(root, "ep/id/stale.data.tmp", KB, 5 * HOUR)  # the budget step runs first: it goes
    broken = write(root, "ep/id/b.data", KB, 60)
    with failing_reads(monkeypatch, {str(broken): errno.ENOTCONN}):
        code, summary = once(root, "--budget-gb=1", "--max-age-hours=24", "--probe", capsys=capsys)
    assert code == EXIT_CANNOT_LIST
    assert "Transport endpoint is not connected" in summary["probe"]["error"]
    assert files(root) == {"ep/id/b.data"}


def test_a_failed_listing_deletes_nothing_and_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "l2"
    write(root, "a/id/old.data", KB, 100 * HOUR)  # expired: would go in a good pass
    write(root, "b/id/x.data", KB, 60)
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if os.fspath(path).endswith("/b"):
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, summary = once(root, "--budget-gb=1", "--max-age-hours=24", capsys=capsys)
    monkeypatch.undo()
    assert code == EXIT_CANNOT_LIST
    assert "Transport endpoint is not connected" in summary["error"]
    assert files(root) == {"a/id/old.data", "b/id/x.data"}


class _Master(BaseHTTPRequestHandler):
    answers: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        body = json.dumps(self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]).encode()
        self.send_response(200 if self.path == "/api/workers" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
        return


def worker(worker_id: int) -> dict[str, Any]:
    return {"address": {"worker_id": worker_id, "hostname": f"10.0.0.{worker_id}"}}


def test_a_newly_lost_worker_triggers_a_probe() -> None:
    _Master.answers = [
        {"live_workers": [worker(1), worker(2)], "lost_workers": []},
        {"live_workers": [worker(1), worker(2)], "lost_workers": []},
        {"live_workers": [worker(1)], "lost_workers": [worker(2)]},
        {"live_workers": [worker(1)], "lost_workers": [worker(2)]},
    ]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Master)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        prober = Prober([url, "http://127.0.0.1:9"], interval_s=3600)  # the second master does not answer
        now = 1000.0
        assert prober.due(now) == (False, "")
        assert prober.due(now + 30) == (False, "")
        assert prober.due(now + 60) == (True, "newly lost workers [2]")
        assert prober.due(now + 90) == (False, ""), "a round in progress"
        assert prober.step("/l2", [], now + 90)[1]["round_finished"] is True
        assert prober.handled_lost == {2}
        assert prober.due(now + 120) == (False, ""), "a worker already handled does not probe again"
        assert prober.due(now + 90 + 3600)[0], "the fallback interval probes anyway"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_metrics_parse_as_prometheus_text_with_the_contract_names() -> None:
    metrics = Metrics("retail", 200 * 1000**3)
    metrics.record({"over_budget": [l2_janitor.Entry("/x", 5, 0.0)], "lost": []}, used=123, now=1_900_000_000.0)
    server = serve(metrics, "127.0.0.1", 0, stale_after_s=600, started=time.time())
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        status, text = _get(base + "/metrics")
        health, _ = _get(base + "/healthz")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    lob = (("lob", "retail"),)
    assert samples[("kvtier_l2_used_bytes", lob)] == 123
    assert samples[("kvtier_l2_budget_bytes", lob)] == 200e9
    assert samples[("kvtier_janitor_last_success_timestamp_seconds", lob)] == 1_900_000_000.0
    over = (("lob", "retail"), ("reason", "over_budget"))
    assert samples[("kvtier_janitor_deleted_files_total", over)] == 1
    assert samples[("kvtier_janitor_deleted_bytes_total", over)] == 5
    reasons = {dict(k[1]).get("reason") for k in samples if k[0] == "kvtier_janitor_deleted_files_total"}
    assert reasons == {"stale_tmp", "unused", "lost", "expired", "over_budget"}
    # The last success is 2030 here, so the pod is healthy; a stale one fails the liveness probe.
    assert health == 200


def test_healthz_fails_when_no_pass_succeeded_recently() -> None:
    metrics = Metrics("retail", 1)
    server = serve(metrics, "127.0.0.1", 0, stale_after_s=1, started=time.time() - 10)
    try:
        status, body = _get(f"http://127.0.0.1:{server.server_address[1]}/healthz")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 503, body


def test_the_loop_keeps_the_budget_under_a_live_writer(tmp_path: Path) -> None:
    """A writer stores 20 KB chunks the way LMCache does (`.tmp`, then rename) as fast as it can for 3 s while the loop
    runs every 0.1 s with a 1 MB budget: usage never exceeds the budget by more than what the writer wrote in two
    periods (plus one file), and the pass after the writer stops is within the budget."""
    root = tmp_path / "l2"
    (root / "ep" / "id").mkdir(parents=True)
    budget, interval, chunk = 1 * MB, 0.1, 20 * KB
    stop_writer, stop_janitor = threading.Event(), threading.Event()
    written = [0]

    def writer() -> None:
        n = 0
        while not stop_writer.is_set():
            final = root / "ep" / "id" / f"{n}.data"
            temp = final.with_suffix(".data.tmp")
            temp.write_bytes(b"\2" * chunk)
            temp.rename(final)
            written[0] += chunk
            n += 1
            time.sleep(0.002)

    args = parse_args(
        [str(root), "--lob=t", f"--budget-gb={budget / 1e9}", "--max-age-hours=1", f"--interval-seconds={interval}"]
    )
    result: list[int] = []
    janitor = threading.Thread(target=lambda: result.append(run(args, stop_janitor)), daemon=True)
    writing = threading.Thread(target=writer, daemon=True)
    janitor.start()
    writing.start()
    peak, started = 0, time.monotonic()
    try:
        while time.monotonic() - started < 3.0:
            peak = max(peak, usage(root))
            time.sleep(0.01)
    finally:
        stop_writer.set()
        writing.join(timeout=10)
    rate = written[0] / (time.monotonic() - started)
    time.sleep(3 * interval)  # at least one pass after the last write
    stop_janitor.set()
    janitor.join(timeout=10)
    assert result == [EXIT_OK]
    assert written[0] > 5 * budget, "the writer wrote several budgets' worth"
    final = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    assert final <= budget
    assert peak <= budget + rate * 2 * interval + chunk, (peak, rate)
