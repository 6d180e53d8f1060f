"""With --json every command answers on stdout in JSON, errors included (not only validate): a script never has to
parse stderr. The error line for people stays on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.bench.testserver import free_port
from kvtier.cli import main as cli


@pytest.mark.parametrize(
    ("argv", "command", "code", "message"),
    [
        (["plan", "-e", "nosuch", "--json"], "plan", 2, "environment 'nosuch' has no file"),
        (["simulate", "--trace", "missing.jsonl", "--json"], "simulate", 2, "cannot read trace missing.jsonl"),
        (["status", "-e", "nosuch", "--json"], "status", 2, "environment 'nosuch' has no file"),
        (["preflight", "-e", "nosuch", "--json"], "preflight", 2, "environment 'nosuch' has no file"),
        (["verify", "-e", "nosuch", "--json"], "verify", 2, "environment 'nosuch' has no file"),
        (["bench", "compare", "a.json", "b.json", "--json"], "bench", 2, "cannot read result file a.json"),
        (["plan", "--tokenz", "5", "--json"], "plan", 2, "unrecognized arguments: --tokenz 5"),
        (["bench", "sweep", "--write-url", "nope", "--json"], "bench", 2, "'nope' is not a URL"),
    ],
)
def test_errors_are_json_on_stdout_with_json(
    argv: list[str], command: str, code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(argv) == code
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error["command"] == command and error["exit_code"] == code
    assert message in error["message"]
    assert message in err and "Traceback" not in err


def test_config_problems_keep_their_fields_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "-e", "nosuch", "--json"]) == 2
    (problem,) = json.loads(capsys.readouterr().out)["error"]["problems"]
    assert problem["file"].endswith("environments/nosuch.yaml")
    assert set(problem) == {"file", "field", "problem", "allowed"}


def test_an_unavailable_url_is_exit_3_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert cli(["bench", "sweep", "--write-url", url, "--json", "--out", str(tmp_path / "o")]) == 3
    assert json.loads(capsys.readouterr().out)["error"]["exit_code"] == 3


def test_without_json_errors_stay_off_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["plan", "-e", "nosuch"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "has no file" in err
