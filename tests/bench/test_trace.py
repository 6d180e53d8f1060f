"""The one Mooncake trace parser (kvtier.trace) behind `kvtier bench trace` and `kvtier simulate`: what it accepts,
what it refuses (with file and line), and that both commands refuse the same files the same way, before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvtier.trace as trace_module
from kvtier.bench.testserver import free_port
from kvtier.cli import main
from kvtier.trace import Row, Trace, TraceError, TraceRequest, load_trace, parse_rows, parse_trace
from tests.support import CONFIG_DIR, SAMPLE_TRACE

GOOD = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}


def _line(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


def test_lines_become_requests_with_their_line_numbers() -> None:
    trace = parse_trace([_line(), "", _line(timestamp=27.5, hash_ids=[1, 3])], "t.jsonl")
    assert trace == Trace(
        (TraceRequest(0.0, 600, 3, (1, 2), line=1), TraceRequest(27.5, 600, 3, (1, 3), line=3)), 512, "t.jsonl"
    )
    assert parse_trace([_line(), "", _line(), "not json"], limit=2).requests[1].line == 3  # stops before line 4
    assert parse_trace([_line(input_length=20, hash_ids=[1, 2, 3])], block_tokens=8).requests[0].input_length == 20


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "t.jsonl:2: not JSON"),
        ("[1, 2]", "t.jsonl:2: a line must be a JSON object with the keys timestamp, input_length"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "output_length"}), "t.jsonl:2: a line must be"),
        (_line(timestamp=-1), "t.jsonl:2: timestamp -1 is not a time"),
        (_line(timestamp="0"), "timestamp '0' is not a time"),
        (_line(timestamp=True), "timestamp True is not a time"),
        (_line(input_length=0, hash_ids=[]), "input_length 0 is not a token count"),
        (_line(input_length="600"), "input_length '600' is not a token count"),
        (_line(output_length=0), "t.jsonl:2: output_length 0 is not a token count; give an integer >= 1"),
        (_line(output_length=1.5), "output_length 1.5"),
        (_line(hash_ids="12"), "hash_ids must be a list of integers"),
        (_line(hash_ids=[1, True]), "hash_ids must be a list of integers"),
        (_line(hash_ids=[1]), "1 hash_ids for input_length 600; a Mooncake trace has one id per 512-token block"),
        (_line(hash_ids=[1, 2, 3]), "3 hash_ids for input_length 600"),
        # Python's JSON reader takes these words (not JSON); an infinite timestamp hung both commands.
        ('{"timestamp": Infinity, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}', "Infinity is not"),
        ('{"timestamp": NaN, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}', "t.jsonl:2: NaN is not a"),
        ('{"timestamp": -Infinity, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}', "-Infinity is"),
        ('{"timestamp": 1e400, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}', "timestamp inf is not"),
        (_line(timestamp=10**400), "is not a time; give finite milliseconds"),
        ('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2], "x": NaN}', "NaN is not"),
    ],
)
def test_bad_lines_name_the_file_and_line(line: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        parse_trace([_line(), line], "t.jsonl")
    assert message in str(caught.value)


GOOD_LINE = json.dumps(GOOD)


@pytest.mark.parametrize(
    "line",
    [
        GOOD_LINE + "\n",
        GOOD_LINE + "\r\n",
        " \t" + GOOD_LINE + " \t\r\n",
        GOOD_LINE + "\f",  # not JSON whitespace
        "\u00a0" + GOOD_LINE,
        GOOD_LINE + " x",
        GOOD_LINE + GOOD_LINE,
        GOOD_LINE[:-1],
        "",
        " \t\r\n",
        "\f\v\n",  # blank to Python, not to JSON
        "\u2028",
        "x",
        _line(hash_ids=[1, True]),
        _line(hash_ids=[True, 2]),
        _line(hash_ids=[0, False]),
        _line(hash_ids=[0, 1], adapter="true"),  # a boolean's word inside a string
        _line(hash_ids=[1, 0], adapter="false-positive"),
        _line(hash_ids=[1, 2], extra=True),
        '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2], "x": NaN}',
    ],
)
def test_the_fast_decode_gives_what_the_stdlib_decoder_and_the_full_id_check_give(line: str) -> None:
    """kvtier.trace decodes a line with the JSON scanner alone when it can, finds blank lines only when a line does
    not decode, and looks for booleans among the ids only on a line that spells one (issue 40 item 2): each line,
    after a good one, gives the rows or the message of `json.JSONDecoder.decode` with the id check on every line,
    blank lines skipped first."""

    def outcome(lines: list[str]) -> list[Row] | str:
        try:
            return list(parse_rows(lines, "t.jsonl"))
        except TraceError as err:
            return str(err)

    full_check = trace_module._ids_ok
    fast = outcome([GOOD_LINE, line])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trace_module, "_decode", trace_module._DECODER.decode)
        patch.setattr(trace_module, "_ids_ok", lambda ids, booleans=True: full_check(ids, True))
        plain = outcome([text for text in (GOOD_LINE, line) if text.strip()])
    assert fast == plain


def test_an_empty_trace_is_refused() -> None:
    with pytest.raises(TraceError, match=r"t\.jsonl: the trace has no requests"):
        parse_trace(["", "  "], "t.jsonl")


def test_unreadable_files_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"cannot read trace .*absent\.jsonl"):
        load_trace(tmp_path / "absent.jsonl")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes((_line() + "\n" + _line() + "\n").encode() + b'{"caf\xe9": 1}\n')
    with pytest.raises(TraceError, match=r"latin.jsonl:3: not UTF-8 text \(byte 0xe9\)"):
        load_trace(latin)


def test_the_public_mooncake_trace_loads_whole() -> None:
    path = SAMPLE_TRACE  # the public trace, unchanged (tests/test_docs.py)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    trace = load_trace(path)
    assert len(trace) == len(rows) == 3993
    assert [r.output_length for r in trace.requests] == [row["output_length"] for row in rows]
    assert min(r.output_length for r in trace.requests) >= 1
    assert load_trace(path, limit=10).requests == trace.requests[:10]


INFINITE = '{"timestamp": Infinity, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}\n'


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (INFINITE.encode(), ":1: Infinity is not a finite number"),
        (b'{"timestamp": 0, "input_length": 6\xff}\n', ":1: not UTF-8 text"),
        ((_line(output_length=0) + "\n").encode(), ":1: output_length 0"),
        ((_line(hash_ids=[1]) + "\n").encode(), ":1: 1 hash_ids for input_length 600"),
    ],
)
def test_both_commands_refuse_a_bad_trace_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    url = f"http://127.0.0.1:{free_port()}"  # never reached: the trace is checked first
    out = tmp_path / "out"
    assert main(["bench", "trace", "--url", url, "--trace", str(path), "--out", str(out), "--no-progress"]) == 2
    assert f"{path}{message}" in capsys.readouterr().err
    assert not out.exists()
    simulate = ["simulate", "--config-dir", str(CONFIG_DIR), "--trace", str(path), "--out", str(out)]
    assert main(simulate) == 2
    assert f"{path}{message}" in capsys.readouterr().err
    assert not out.exists()
