"""A pytest plugin for logs that are not terminals (CI): one line whenever nothing has been printed for a while.

`pytest -q` is silent while it collects (about 20 s for this suite on a busy machine) and during any long test (a
synth fixture, the README's try-it block), and a CI log cannot tell silence from a hang. With `-p tests.heartbeat`
(the Makefile's `pytest` target) a line says what is running and for how long, every KVTIER_HEARTBEAT_S seconds
(default 6) of silence.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

INTERVAL_S = float(os.environ.get("KVTIER_HEARTBEAT_S", "6"))
# The log itself, taken when pytest imports this plugin (-p), before its output capture redirects fd 1 for each
# test: a line written from this thread must reach the log, not the running test's captured output.
_LOG = os.dup(1)


class Heartbeat:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.what = "collecting the tests"
        self.since = self.last = time.monotonic()
        self.files = 0
        self.midline = False  # pytest may have left a line of dots unfinished since the last beat
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="kvtier-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self.stop.wait(min(1.0, INTERVAL_S / 2)):
            with self.lock:
                now = time.monotonic()
                if now - self.last < INTERVAL_S:
                    continue
                self.last = now
                detail = f", {self.files} files so far" if self.what == "collecting the tests" else ""
                line = f"[heartbeat] still {self.what} ({now - self.since:.0f} s{detail})\n"
                os.write(_LOG, (("\n" if self.midline else "") + line).encode())
                self.midline = False

    def moved(self, what: str | None = None, *, printed: bool = False) -> None:
        with self.lock:
            self.last = time.monotonic()
            self.midline = self.midline or printed
            if what is not None:
                self.what, self.since = what, self.last

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.nodeid.endswith(".py"):
            self.files += 1  # collection prints nothing under -q: the beat counts on

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.moved(f"running {nodeid}")

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.moved(printed=True)  # its dot (or letter) was printed

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        self.stop.set()  # the summary follows at once


def pytest_configure(config: pytest.Config) -> None:
    if INTERVAL_S <= 0:
        return
    heartbeat = Heartbeat()
    config.pluginmanager.register(heartbeat, "kvtier-heartbeat")
    config.add_cleanup(heartbeat.stop.set)
    heartbeat.thread.start()
