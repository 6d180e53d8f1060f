"""Failures are reported per request and counted, never a crash; exit codes follow the design (0/1/2/3)."""

from __future__ import annotations

import dataclasses
import functools
import http.server
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from kvtier import __version__
from kvtier.bench.records import RequestRecord
from kvtier.bench.result import BenchResult
from kvtier.bench.testserver import Behaviour, FakeCluster, free_port
from kvtier.cli import main

QUICK = Behaviour(cold_s=0.1, l2_s=0.1, warm_s=0.1, itl_s=0.001, output_tokens=2)


def _sweep(tmp_path: Path, write: str, read: str | None = None, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "out"
    argv = ["bench", "sweep", "--write-url", write, "--lengths", "50,60", "--settle-s", "0", "--no-progress"]
    argv += ["--read-url", read] if read else []
    code = main([*argv, "--out", str(out), "--no-plots", *extra])
    path = out / "result.json"
    return code, json.loads(path.read_text()) if path.exists() else {}


def test_no_url_answers_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    code, result = _sweep(tmp_path, dead)
    assert code == 3
    assert result == {}
    assert "no URL answers" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # the folder made for the run is not left behind empty


def test_one_dead_url_is_counted_per_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with FakeCluster(1, QUICK) as c:
        code, result = _sweep(tmp_path, c.urls[0], dead)
    # The write URL answered and the reads failed: counted per request, and the sweep failed (it measured no reuse).
    assert code == 1
    runs = {r["name"]: r for r in result["runs"]}
    assert runs["cold"]["ok"] == 2
    assert runs["reused"]["errors"] == 2 and runs["reused"]["errors_by_kind"] == {"connect": 2}
    rows = result["details"]["sweep"]
    assert [r["status"] for r in rows] == ["read failed", "read failed"]
    assert all(r["reused_ttft_ms"] is None and r["speedup"] is None for r in rows)  # a failure, never 0 ms
    assert result["details"]["failed_lengths"] == [50, 60]
    out, err = capsys.readouterr()
    assert "did not answer" in out and "read failed" in out
    assert "every reused request failed (2 sent: 2 connect)" in err
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**failed**" in summary and "read failed" in summary


@pytest.mark.parametrize(
    ("behaviour", "kind", "message"),
    [
        (Behaviour(fail_status=500), "http", "HTTP 500"),
        (Behaviour(fail_status=429), "http", "HTTP 429"),
        (Behaviour(stream=False, cold_s=0.1), "not_streaming", "did not stream"),
    ],
)
def test_server_errors_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], behaviour: Behaviour, kind: str, message: str
) -> None:
    with FakeCluster(1, behaviour) as c:
        code, result = _sweep(tmp_path, c.urls[0])
    assert code == 1
    records = result["requests"]
    assert len(records) == 4 and all(not r["ok"] for r in records)
    assert {r["error_kind"] for r in records} == {kind}
    assert all(message in r["error"] for r in records)
    assert f"no request succeeded (4 sent: 4 {kind})" in capsys.readouterr().err
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Errors" in summary and message in summary


def test_timeouts_are_counted(tmp_path: Path) -> None:
    with FakeCluster(1, Behaviour(stall_s=1.5)) as c:
        code, result = _sweep(tmp_path, c.urls[0], None, "--timeout-s", "0.2", "--no-metrics")
    assert code == 1
    for r in result["requests"]:
        assert r["error_kind"] == "timeout"
        assert r["e2e_ms"] >= 200  # not before the timeout ...
        assert r["e2e_ms"] < 1500  # ... and without waiting for the stalled server


def test_missing_metrics_do_not_fail_the_run(tmp_path: Path) -> None:
    with FakeCluster(1, Behaviour(metrics=False, lmcache_metrics=False, cold_s=0.1, output_tokens=2)) as c:
        code, result = _sweep(tmp_path, c.urls[0])
    assert code == 0
    assert result["cache"][0]["scraped"] is False
    assert "HTTP 404" in result["cache"][0]["notes"][0]


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--write-url", "not-a-url"],
        ["sweep", "--write-url", "http://127.0.0.1:1", "--lengths", "100,0"],
        ["sweep", "--write-url", "http://127.0.0.1:1", "--lengths", "100,100"],
        ["shared-prefix", "--url", "http://127.0.0.1:1", "--qps", "0"],
        ["trace", "--url", "http://127.0.0.1:1", "--trace", "t.jsonl", "--qps", "1", "--time-scale", "1"],
        ["sweep"],
        ["sweep", "--write-url", "http://127.0.0.1:abc"],
        ["sweep", "--write-url", "http://127.0.0.1:99999"],
        ["sweep", "--write-url", "http://127.0.0.1:0"],
        ["sweep", "--write-url", "http://[::1"],
        ["shared-prefix", "--url", "http://127.0.0.1:65536/v1"],
        ["sweep", "--write-url", "http://127.0.0.1:1", "--metrics-url", "http://10.0.0.1:-1"],
    ],
)
def test_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_ports_1_and_65535_are_urls(tmp_path: Path) -> None:
    from kvtier.cli.bench import _url

    assert _url("http://127.0.0.1:65535/v1/") == "http://127.0.0.1:65535"
    assert _url("https://[::1]:1") == "https://[::1]:1"


def test_an_unwritable_out_folder_exits_2_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with FakeCluster(1, QUICK) as c:
        argv = ["bench", "sweep", "--write-url", c.urls[0], "--lengths", "50", "--no-progress"]
        assert main([*argv, "--out", str(blocker / "run")]) == 2
        sent = [e for e in c.servers[0].log if e.path.endswith("completions")]
    assert f"cannot write to the output folder {blocker / 'run'}" in capsys.readouterr().err
    assert sent == []


def test_unreadable_or_too_long_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # never reached: the trace is checked first
    assert main(["bench", "trace", "--url", url, "--trace", str(tmp_path / "absent.jsonl")]) == 2
    assert "cannot read trace" in capsys.readouterr().err
    long = tmp_path / "long.jsonl"
    row = {"timestamp": 0, "input_length": 9000, "output_length": 10, "hash_ids": list(range(18))}
    long.write_text(json.dumps(row) + "\n")
    assert main(["bench", "trace", "--url", url, "--trace", str(long), "--max-model-len", "4096"]) == 2
    assert "longer than --max-model-len 4096" in capsys.readouterr().err


def _result(run_ttfts: dict[str, list[float]], label: str) -> BenchResult:
    records = []
    for run, ttfts in run_ttfts.items():
        for i, t in enumerate(ttfts):
            records.append(RequestRecord(run, "u", i, {}, float(i * 1000), ok=True, ttft_ms=t, e2e_ms=t + 100))
    return BenchResult(
        "shared-prefix", "2026-01-01T00:00:00+00:00", 1.0, {"salt": label}, ["shared-prefix"], records, label=label
    )


def test_compare_prints_differences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _result({"shared-prefix": [100.0, 200.0, 300.0]}, "roundrobin").write(a)
    _result({"shared-prefix": [50.0, 60.0, 70.0], "extra": [1.0]}, "prefixaware").write(b)
    assert main(["bench", "compare", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["section"], r["metric"]): r for r in data["rows"]}
    p50 = rows[("run shared-prefix", "TTFT p50 ms")]
    assert (p50["a"], p50["b"], p50["delta"], p50["ratio"]) == (200.0, 60.0, -140.0, 0.3)
    assert data["only_in_b"] == ["extra"]
    assert main(["bench", "compare", str(a), str(b)]) == 0
    table = capsys.readouterr().out
    assert "TTFT p50 ms" in table and "-140" in table


def test_compare_rejects_foreign_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "x.json"
    foreign.write_text('{"hello": 1}')
    assert main(["bench", "compare", str(foreign), str(foreign)]) == 2
    assert "not a kvtier bench result" in capsys.readouterr().err
    assert main(["bench", "compare", str(tmp_path / "nope.json"), str(foreign)]) == 2


def _written(tmp_path: Path, change: Any) -> Path:
    """A real result file with one change applied to its JSON."""
    path = tmp_path / "good.json"
    _result({"shared-prefix": [100.0, 200.0]}, "x").write(path)
    data = json.loads(path.read_text())
    change(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    return bad


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(requests="abc"), 'requests is "abc", not a list'),
        (lambda d: d.update(cache=5), "cache is 5, not a list"),
        (lambda d: d.update(cache=[5]), "cache[0] is not an object"),
        (
            lambda d: d.update(cache=[{"tiers": {"l0": {"hit_tokens": "many"}}}]),
            'cache[0].tiers.l0.hit_tokens is "many"',
        ),
        (
            lambda d: d.update(cache=[{"l2_io": {"read_bytes": None}}]),
            "cache[0].l2_io.read_bytes is null, not a number",
        ),
        (lambda d: d["requests"][1].update(ttft_ms="fast"), 'requests[1].ttft_ms is "fast", not a number or null'),
        (lambda d: d["requests"][0].update(ok="yes"), 'requests[0].ok is "yes", not true or false'),
        (lambda d: d["requests"][0].update(itl_ms=[1.0, "x"]), 'requests[0].itl_ms[1] is "x"'),
        (lambda d: d["requests"][0].update(start_ms=True), "requests[0].start_ms is true, not a number"),
        (lambda d: d["requests"][0].pop("run"), "requests[0] has no 'run'"),
        (lambda d: d["requests"].append(7), "requests[2] is not an object"),
        (lambda d: d.pop("started_at"), "the file has no 'started_at'"),
        (lambda d: d.update(duration_s="1s"), 'duration_s is "1s", not a number'),
        (lambda d: d.update(settings=[]), "settings is [], not an object"),
        (lambda d: d.update(run_order=["a", 1]), "run_order[1] is 1, not a string"),
        (lambda d: d.update(details={"sweep": {}}), "details.sweep is {}, not a list"),
        (lambda d: d.update(details={"sweep": [{"length": 5}]}), "details.sweep[0] has no 'cold_ttft_ms'"),
        (lambda d: d["settings"].update(percentiles=["p99"]), 'settings.percentiles[0] is "p99", not a number'),
        (lambda d: d["settings"].update(percentiles=[250]), "settings.percentiles[0] is 250, not a percentile"),
        (lambda d: d["settings"].update(slo_ms={"ttft": "fast"}), 'settings.slo_ms.ttft is "fast", not a number'),
        (lambda d: d["settings"].update(slo_ms={"itl": 5}), "settings.slo_ms has 'itl', not one of"),
        (lambda d: d.update(partial="yes"), 'partial is "yes", not true or false'),
        (lambda d: d["requests"][1].update(ttft_ms=-80.5), "requests[1].ttft_ms is -80.5, and a timing cannot be"),
        (lambda d: d["requests"][0].update(itl_ms=[1.0, -2]), "requests[0].itl_ms[1] is -2, and a timing cannot be"),
        (lambda d: d.update(duration_s=-1), "duration_s is -1, and a timing cannot be negative"),
        (
            lambda d: d.update(
                details={"sweep": [{"length": 5, "cold_ttft_ms": 1, "reused_ttft_ms": -1, "speedup": 1}]}
            ),
            "details.sweep[0].reused_ttft_ms is -1, and a timing cannot be negative",
        ),
    ],
)
def test_compare_refuses_malformed_results_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, message: str
) -> None:
    bad = _written(tmp_path, change)
    assert main(["bench", "compare", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: malformed kvtier bench result: {message}" in err
    assert "Traceback" not in err


def test_compare_refuses_a_negative_timing_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "a.json"
    _result({"shared-prefix": [100.0, 200.0]}, "a").write(good)
    bad = _written(tmp_path, lambda d: d["requests"][0].update(ttft_ms=-80.36))
    assert main(["bench", "compare", str(good), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no table with a "-80.36x" ratio
    assert captured.err.splitlines() == [
        f"kvtier bench: {bad}: malformed kvtier bench result: requests[0].ttft_ms is -80.36, and a timing cannot be "
        "negative; pass a result.json written by kvtier bench"
    ]


def test_compare_escapes_control_characters_in_a_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _result({"shared-prefix": [100.0]}, "red\x1b[31m\nlabel").write(a)
    _result({"shared-prefix": [50.0]}, "plain").write(b)
    assert main(["bench", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out  # no escape byte reaches the terminal
    assert f"A = {a} (shared-prefix, red\\x1b[31m\\nlabel)" in " ".join(out.split())  # shown, escaped


def test_a_runs_own_summary_escapes_control_characters_in_its_label() -> None:
    """The run's terminal summary and summary.md printed a label's (and a --salt's) bytes raw, where compare escapes
    them: a label holding "\x1b[31m" recoloured the terminal, and `cat summary.md` did the same later."""
    from kvtier.bench.report import markdown
    from kvtier.bench.terminal import summary_lines

    result = _result({"shared-prefix": [100.0]}, "red\x1b[31m\nlabel")
    shown = "\n".join(summary_lines(result))
    assert "\x1b" not in shown and "red\\x1b[31m\\nlabel" in shown
    written = markdown(result)  # the helper gives the run this label as its salt too
    assert "\x1b" not in written
    assert written.splitlines()[0] == "# kvtier bench: shared-prefix (red\\x1b[31m\\nlabel)"


def test_compare_reads_its_own_sweep_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = {"length": 500, "cold_ttft_ms": 300.0, "reused_ttft_ms": 100.0, "speedup": 3.0, "prompt_tokens": None}
    a = _written(tmp_path, lambda d: d.update(workload="sweep", details={"sweep": [row], "same_url": True}))
    assert main(["bench", "compare", str(a), str(a), "--json"]) == 0
    rows = {(r["section"], r["metric"]): r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows[("sweep length 500", "speedup x")]["a"] == 3.0


@pytest.mark.parametrize(("limit", "code"), [("0.2", 1), ("0.25", 0), (None, 0)])
def test_max_error_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: str | None, code: int) -> None:
    """Every 4th request fails: 2 of 8 (25%) is above a 0.2 limit and within 0.25; without a limit it passes."""
    with FakeCluster(1, Behaviour(cold_s=0.1, itl_s=0.001, output_tokens=2, fail_every=4)) as c:
        argv = ["bench", "shared-prefix", "--url", c.urls[0], "--users", "4", "--rounds", "2", "--qps", "50"]
        argv += ["--concurrency", "1", "--system-tokens", "16", "--no-progress", "--no-plots", "--no-metrics"]
        argv += ["--out", str(tmp_path / "out"), *(["--max-error-rate", limit] if limit else [])]
        assert main(argv) == code
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["runs"][0]["errors_by_kind"] == {"http": 2}
    err = capsys.readouterr().err
    assert ("2 of 8 requests failed (25.0%), above --max-error-rate 0.2" in err) == (code == 1)


def test_trace_duration_sends_only_what_is_scheduled_before_it(tmp_path: Path) -> None:
    from kvtier.bench.workloads import TraceReplay
    from kvtier.trace import TraceRequest

    reqs = tuple(TraceRequest(i * 1000.0, 16, 2, (i,), line=i + 1) for i in range(10))
    replay = TraceReplay(url="http://x", path=tmp_path / "t.jsonl", requests=reqs, time_scale=0.5, duration_s=2.0)
    assert [tr.line for tr, _ in replay.schedule()] == [1, 2, 3, 4]  # sent at 0, 0.5, 1.0, 1.5 s
    paced = TraceReplay(url="http://x", path=tmp_path / "t.jsonl", requests=reqs, qps=2.0, duration_s=2.0)
    assert [at for _, at in paced.schedule()] == [0.0, 500.0, 1000.0, 1500.0]
    assert replay.planned() == 4


def test_compare_names_a_newer_format_and_the_version_that_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = _written(tmp_path, lambda d: d.update(format="kvtier-bench/2", kvtier_version="0.9.0"))
    assert json.loads((tmp_path / "good.json").read_text())["kvtier_version"] == __version__
    assert main(["bench", "compare", str(newer), str(newer)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f'kvtier bench: {newer} is a newer kvtier bench result ("format": "kvtier-bench/2"; this kvtier '
        f'{__version__} reads "kvtier-bench/1"); read it with the kvtier version that wrote it (0.9.0), or upgrade '
        "kvtier"
    ]
    other = _written(tmp_path, lambda d: d.update(format="other-tool/7"))
    assert main(["bench", "compare", str(other), str(other)]) == 2
    assert "is not a kvtier bench result" in capsys.readouterr().err


def _html_server(tmp_path: Path) -> Any:
    """A real web server that is not an OpenAI API (Python's static file server, 404 pages in HTML)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_url_that_is_not_an_openai_server_says_what_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _html_server(tmp_path)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, result = _sweep(tmp_path, url)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2 and result == {}
    err = capsys.readouterr().err
    assert err.startswith(
        f"kvtier bench: not an OpenAI-compatible server: {url}/v1/models answered HTTP 404 (text/html: "
    )
    assert "point the URL at vLLM or its router" in err
    assert "pass --model" not in err and len(err.splitlines()) == 1


def test_an_openai_server_with_no_model_asks_for_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(1, dataclasses.replace(QUICK, model="")) as c:
        code, _ = _sweep(tmp_path, c.urls[0])
    assert code == 2
    assert "lists no model; pass the served model's name with --model" in capsys.readouterr().err


def test_a_metrics_url_that_saw_none_of_the_run_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeCluster(2, QUICK) as c:  # the run goes to the first server, --metrics-url names the second
        code, result = _sweep(tmp_path, c.urls[0], None, "--metrics-url", c.urls[1])
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{c.urls[1]} counted none of this run's 4 answered requests" in out
    assert any("counted none" in n for n in result["cache"][0]["notes"])
