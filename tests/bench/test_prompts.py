"""Prompt text: deterministic from the seed, salted per run and per length; Mooncake traces turned into text."""

from __future__ import annotations

from kvtier.bench.client import _StreamReader
from kvtier.bench.prompts import PromptMaker, new_salt
from kvtier.bench.records import RequestRecord
from kvtier.bench.trace import trace_prompt
from kvtier.bench.workloads import _leading_seen
from kvtier.trace import TraceRequest

LENGTHS = (500, 1000, 1500, 2000, 2500, 3000, 5000, 50)


def test_sweep_prompts_are_deterministic_per_seed_and_salt() -> None:
    a, b = PromptMaker(0, "s1"), PromptMaker(0, "s1")
    assert [a.sweep_prompt(n) for n in LENGTHS] == [b.sweep_prompt(n) for n in LENGTHS]
    assert PromptMaker(1, "s1").sweep_prompt(500) != a.sweep_prompt(500)
    assert all(len(a.sweep_prompt(n).split()) == n for n in LENGTHS)


def test_a_new_salt_changes_the_start_of_every_prompt() -> None:
    """A re-run starts cold: its prompts differ from the last run's in the first words (the first cache block)."""
    a, b = PromptMaker(0, new_salt()), PromptMaker(0, new_salt())
    assert a.salt != b.salt
    for n in LENGTHS:
        assert a.sweep_prompt(n).split()[:8] != b.sweep_prompt(n).split()[:8]


def test_no_prompt_is_a_prefix_of_another() -> None:
    prompts = [PromptMaker(0, salt).sweep_prompt(n) for salt in ("aa", "ab") for n in LENGTHS]
    for i, p in enumerate(prompts):
        for j, q in enumerate(prompts):
            if i != j:
                assert not q.startswith(p), (i, j)


def test_equal_hash_ids_give_equal_text() -> None:
    maker = PromptMaker(0, "salt")
    a = TraceRequest(0, 20, 1, (1, 2, 3), line=1)
    b = TraceRequest(0, 24, 1, (1, 2, 4), line=2)
    c = TraceRequest(0, 16, 1, (5, 6), line=3)
    d = TraceRequest(0, 30, 1, (1,), line=4)  # fewer ids than its length: the rest is its own filler
    words = {r.line: trace_prompt(r, maker, block_tokens=8).split() for r in (a, b, c, d)}
    assert [len(words[n]) for n in (1, 2, 3, 4)] == [20, 24, 16, 30]
    assert words[1][:16] == words[2][:16]  # two shared blocks
    assert words[1][16:20] != words[2][16:20]
    assert words[3][:8] != words[1][:8]
    assert words[4][:8] == words[1][:8]
    other_run = trace_prompt(a, PromptMaker(0, "other"), block_tokens=8).split()
    assert other_run[:8] != words[1][:8]


def test_leading_seen_counts_prefix_chained_blocks() -> None:
    assert _leading_seen((1, 2, 3), {1, 2}) == 2
    assert _leading_seen((1, 2, 3), {2, 3}) == 0
    assert _leading_seen((), {1}) == 0


def _feed(lines: list[str]) -> RequestRecord:
    rec = RequestRecord("r", "u", 0, {}, 0.0)
    reader = _StreamReader(0.0)
    for line in lines:
        if not reader.feed(line, rec):
            break
    if rec.error_kind is None:
        reader.check_complete(rec)
    reader.finish(rec)
    return rec


def test_sse_parsing_text_usage_and_failures() -> None:
    rec = _feed(
        [
            'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}',
            "",
            'data: {"choices":[{"delta":{"content":"Hi"}}]}',
            ": keep-alive comment",
            'data: {"choices":[{"delta":{"content":" there"}}]}',
            'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}',
            "data: [DONE]",
        ]
    )
    assert rec.ok and rec.output_text == "Hi there"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (7, 2, 4)
    assert len(rec.itl_ms) == 1
    assert _feed(['data: {"error": {"message": "boom"}}']).error_kind == "server"
    assert _feed(["data: {not json"]).error_kind == "protocol"
    assert _feed(["data: [DONE]"]).error_kind == "protocol"  # no data at all
