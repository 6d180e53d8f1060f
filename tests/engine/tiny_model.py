"""Build the engine test's tiny model offline: a random-initialised Llama and a byte-level BPE tokenizer trained here.

Runs in the engine venv (torch, transformers, tokenizers): `python tiny_model.py OUT_DIR SEED CORPUS_FILE`. The same
seed and corpus give the same files (no hub, no download). Its logits are meaningless; the test only needs real
attention layers whose KV cache LMCache moves, and a tokenizer that turns the benchmark's English words into about one
token each so prompt lengths stay near what `kvtier bench` asks for.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Small enough to build in seconds and serve on one core, big enough for real paged KV: 2 layers x 2 KV heads x 64.
SHAPE = {
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,  # the example endpoint renders --max-model-len 32768
}
SPECIAL = ["<unk>", "<s>", "</s>"]


def build(out: Path, seed: int, corpus: list[str]) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=SHAPE["vocab_size"],
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=32768
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        **SHAPE,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        initializer_range=0.2,  # peaky logits, so greedy outputs rarely tie
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: tiny_model.py OUT_DIR SEED CORPUS_FILE", file=sys.stderr)
        return 2
    out, seed, corpus = Path(argv[0]), int(argv[1]), Path(argv[2]).read_text(encoding="utf-8").splitlines()
    build(out, seed, corpus)
    print(f"tiny model written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
