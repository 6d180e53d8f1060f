"""Unrecognised arguments: the sub-command's usage and a hint (issue 39), not the top-level usage alone.

Before, every case below ended in `usage: kvtier [-h] [--version] COMMAND ...` and "kvtier: error: unrecognized
arguments: ..." with no hint (KVTIER_HINTS_BREAK=1 restores that: each case here then fails).
"""

from __future__ import annotations

import json

import pytest

from kvtier.cli import main

CASES = [
    (["validate", "dev"], "kvtier validate", "dev; the environment is an option: kvtier validate -e dev"),
    (["plan", "prod"], "kvtier plan", "prod; the environment is an option: kvtier plan -e prod"),
    (["validate", "--envv", "dev"], "kvtier validate", "--envv dev; did you mean --env?"),
    (["validate", "-e", "dev", "extra"], "kvtier validate", "extra (kvtier validate --help lists its options)"),
    (
        ["bench", "shared-prefix", "--url", "http://127.0.0.1:9", "--request-rate", "2"],
        "kvtier bench shared-prefix",
        "--request-rate 2; --request-rate is vllm bench serve's name; kvtier bench shared-prefix calls it --qps",
    ),
    (
        ["bench", "sweep", "--write-url", "http://127.0.0.1:9", "--request-rate", "2"],
        "kvtier bench sweep",
        "--request-rate 2; --request-rate is vllm bench serve's name; kvtier calls it --qps, in bench shared-prefix "
        "and bench trace",
    ),
    (
        ["bench", "trace", "--url", "http://127.0.0.1:9", "--trace", "t.jsonl", "--max-concurrency", "4",
         "--metric-percentiles", "50,99"],
        "kvtier bench trace",
        "--max-concurrency 4 --metric-percentiles 50,99; --max-concurrency is vllm bench serve's name; kvtier bench "
        "trace calls it --concurrency; --metric-percentiles is vllm bench serve's name; kvtier bench trace calls it "
        "--percentiles",
    ),
    (
        ["bench", "sweep", "--base-url", "http://127.0.0.1:9", "--write-url", "http://127.0.0.1:9"],
        "kvtier bench sweep",
        "--base-url http://127.0.0.1:9; --base-url is vllm bench serve's name; kvtier bench sweep calls it --write-url",
    ),
    (
        ["bench", "shared-prefix", "--base-url", "http://127.0.0.1:9", "--url", "http://127.0.0.1:9"],
        "kvtier bench shared-prefix",
        "--base-url http://127.0.0.1:9; --base-url is vllm bench serve's name; kvtier bench shared-prefix calls it --url",
    ),
    # An option where the workload's name belongs: argparse took its value for the workload ("invalid choice: '5'").
    (
        ["bench", "--request-rate", "5"],
        "kvtier bench",
        "--request-rate 5; --request-rate is vllm bench serve's name; kvtier calls it --qps, in bench shared-prefix and "
        "bench trace",
    ),
    (
        ["bench", "--base-url", "http://127.0.0.1:9"],
        "kvtier bench",
        "--base-url http://127.0.0.1:9; --base-url is vllm bench serve's name; kvtier calls it --url, in bench "
        "shared-prefix and bench trace",
    ),
    (
        ["bench", "--qps", "2", "trace", "--url", "http://127.0.0.1:9", "--trace", "t.jsonl"],
        "kvtier bench",
        "--qps 2; --qps is an option of bench shared-prefix and bench trace: give it after the sub-command's name",
    ),
    (
        ["--request-rate", "5", "bench"],
        "kvtier",
        "--request-rate 5; --request-rate is vllm bench serve's name; kvtier calls it --qps, in bench shared-prefix and "
        "bench trace",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "prog", "tail"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_unrecognised_arguments_get_the_sub_commands_usage_and_a_hint(
    argv: list[str], prog: str, tail: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"usage: {prog} [-h]")
    assert err[-1] == f"{prog}: error: unrecognized arguments: {tail}"


def test_with_json_the_hint_is_the_message() -> None:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", "dev", "--json"])
    assert code == 2
    message = json.loads(out.getvalue())["error"]["message"]
    assert message == (
        "kvtier validate: error: unrecognized arguments: dev; the environment is an option: kvtier validate -e dev"
    )


@pytest.mark.parametrize(
    ("argv", "code", "last"),
    [
        (["bench", "swep"], 2, "kvtier bench: error: argument WORKLOAD: invalid choice: 'swep' (choose from 'sweep', "
                               "'multiturn', 'shared-prefix', 'trace', 'compare')"),
        (["bench"], 2, "kvtier bench: error: the following arguments are required: WORKLOAD"),
        (["bench", "--help"], 0, "  -h, --help     show this help message and exit"),
        (["--version"], 0, None),
    ],
)  # fmt: skip
def test_what_comes_before_a_sub_command_is_otherwise_argparse_s(
    argv: list[str], code: int, last: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt workload, a missing one, and the options the parsers do take keep argparse's own answers."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == code
    captured = capsys.readouterr()
    if last is not None:
        assert (captured.err or captured.out).splitlines()[-1] == last
