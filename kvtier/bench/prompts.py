"""Prompt text that is deterministic from a seed and salted per run, so a re-run starts cold.

There is no tokenizer here: a prompt of N "tokens" is N common English words, which most LLM tokenizers turn into
about one token each (a word with its leading space). Reported token counts always come from the server's `usage`.
"""

from __future__ import annotations

import random
import secrets

# Short, common words: about one token each in the Llama, Qwen and Mistral tokenizers.
_WORDS = """
    the of and to in is was for on are as with his they at be this from have or by one had not but what all were when
    we there can an your which their said if do will each about how up out them then she many some so these would
    other into has more her two like him see time could no make than first been its who now people my made over did
    down only way find use may water long little very after words called just where most know get through back much
    go good new write our me man too any day same right look think also around another came come work three word must
    because does part even place well such here take why things help put years different away again off went old
    number great tell men say small every found still between name should home big give air line set own under read
    last never us left end along while might next sound below saw something thought both few those always looked show
    large often together asked house world going want school important until form food keep children feet land side
    without boy once animals life enough took sometimes four head above kind began almost live page got earth need far
    hand high year mother light parts country father let night following picture being study second eyes soon times
    story boys since white days ever paper hard near sentence better best across during today others however sure means
    knew try told young miles sun ways thing whole hear example heard several change answer room sea against top
    turned learn point city play toward five using himself usually money seen car morning given body family later move
"""
VOCAB = tuple(_WORDS.split())


def new_salt() -> str:
    """A fresh run salt: 8 hex digits from the OS's random source (not from the seed)."""
    return secrets.token_hex(4)


class PromptMaker:
    """Words from `seed`, keyed by what they are for; the run `salt` goes first in every prompt it builds."""

    def __init__(self, seed: int, salt: str) -> None:
        self.seed = seed
        self.salt = salt

    def words(self, key: str, count: int) -> list[str]:
        # A str seed is hashed with SHA-512 by `random`, so the words do not depend on PYTHONHASHSEED.
        rng = random.Random(f"kvtier-bench:{self.seed}:{key}")
        return [rng.choice(VOCAB) for _ in range(max(count, 0))]

    def header(self, what: str) -> list[str]:
        """The salted start of a prompt: unique per run and per `what`, so no two prompts share a cached prefix."""
        return f"[kvtier bench run {self.salt} {what}]".split()

    def sweep_prompt(self, length: int) -> str:
        """About `length` tokens; the body depends on the seed and the length, the first words on the salt."""
        head = self.header(f"sweep length {length}")
        return " ".join(head + self.words(f"sweep:{length}", length - len(head)))

    def system_prompt(self, length: int) -> str:
        head = self.header("shared system prompt")
        return " ".join(head + self.words("system", length - len(head)))

    def block(self, block_id: int, length: int) -> list[str]:
        """The text of one trace block: equal ids give equal text within a run (salted, so runs differ)."""
        return self.words(f"{self.salt}:block:{block_id}", length)
