"""The test server's own command line: a port it cannot take is one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kvtier.bench.testserver import Behaviour, FakeCluster, free_port, main, stop_process, wait_until_answering
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


def _post(url: str, body: dict[str, object]) -> tuple[list[dict[str, Any]], bytes]:
    """The answer's JSON objects (one, or each SSE event but [DONE]) and the raw body."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as resp:
        raw = resp.read()
    if not body.get("stream"):
        return [json.loads(raw)], raw
    events = [line.removeprefix(b"data: ") for line in raw.split(b"\n\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]], raw


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "whole"])
@pytest.mark.parametrize(
    ("path", "limit", "objects"),
    [
        ("/v1/completions", {"max_tokens": 5}, ("text_completion", "text_completion")),
        ("/v1/chat/completions", {"max_completion_tokens": 5}, ("chat.completion.chunk", "chat.completion")),
        ("/v1/chat/completions", {"max_completion_tokens": 5, "max_tokens": 9}, ("chat.completion.chunk", "chat.completion")),
    ],
    ids=["completions", "chat", "chat-both-limits"],
)  # fmt: skip
def test_answers_carry_the_openai_fields_and_the_token_limit(
    path: str, limit: dict[str, int], objects: tuple[str, str], stream: bool
) -> None:
    """Every answer and every chunk of a stream has `id`, `object`, `created` and `model` (what AIPerf and other
    OpenAI clients read), and the answer has as many completion tokens as `max_completion_tokens` (before
    `max_tokens`, as vLLM reads them) asks, counted in `usage` and in the text."""
    chat = "chat" in path
    prompt: dict[str, object] = (
        {"messages": [{"role": "user", "content": "one two three"}]} if chat else {"prompt": "one two three"}
    )
    body = {
        "model": "kvtier/fake-model",
        **prompt,
        **limit,
        "stream": stream,
        "stream_options": {"include_usage": True},
    }
    with FakeCluster(1, Behaviour(cold_s=0.01, l2_s=0.01, warm_s=0.01, itl_s=0.001)) as cluster:
        answers, _ = _post(cluster.urls[0] + path, body)
    for answer in answers:
        assert answer["object"] == objects[0 if stream else 1]
        assert answer["model"] == "kvtier/fake-model"
        assert isinstance(answer["created"], int) and abs(answer["created"] - time.time()) < 600
        assert answer["id"].startswith("chatcmpl-" if chat else "cmpl-")
    assert len({a["id"] for a in answers}) == 1  # one id for the whole stream
    (usage,) = [a["usage"] for a in answers if a.get("usage")]
    assert usage["completion_tokens"] == 5
    if stream:
        texts = [c["delta"].get("content", "") if chat else c["text"] for a in answers for c in a["choices"]]
    else:
        texts = [answers[0]["choices"][0]["message"]["content"] if chat else answers[0]["choices"][0]["text"]]
    assert len("".join(texts).split()) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cold-s", "-1"], "argument --cold-s: -1 is not a delay; give seconds >= 0, such as 0.4"),
        (["--l2-s", "-0.5"], "argument --l2-s: -0.5 is not a delay; give seconds >= 0, such as 0.4"),
        (["--warm-s", "nan"], "argument --warm-s: nan is not a delay; give seconds >= 0, such as 0.4"),
        (["--warm-s", "soon"], "argument --warm-s: 'soon' is not a number of seconds; give one such as 0.4"),
    ],
)
def test_a_negative_or_unreadable_delay_is_one_line_and_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"kvtier testserver: {message} (--help lists the options)"]
