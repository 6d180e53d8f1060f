"""Prompt text for the requests of a Mooncake trace (parsed by kvtier.trace, shared with `kvtier simulate`)."""

from __future__ import annotations

from kvtier.bench.prompts import PromptMaker
from kvtier.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


def trace_prompt(req: TraceRequest, maker: PromptMaker, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> str:
    """Prompt text for a trace request: block i of the prompt is the text of hash id i, cut to input_length words.

    Equal hash ids give equal text, so requests sharing leading ids share a prefix. A request with fewer ids than
    its length needs (built in code: the parser rejects such lines) gets filler unique to it for the rest.
    """
    words: list[str] = []
    for block_id in req.hash_ids:
        if len(words) >= req.input_length:
            break
        words.extend(maker.block(block_id, block_tokens))
    if len(words) < req.input_length:
        words.extend(maker.words(f"{maker.salt}:filler:{req.line}", req.input_length - len(words)))
    return " ".join(words[: req.input_length])
