"""Build the tokenizer AIPerf counts tokens with, offline: a byte-level BPE trained here (as tests/engine/tiny_model.py
builds the tiny model's), saved in the layout of a Hugging Face hub cache so AIPerf finds it with `HF_HUB_OFFLINE=1`.

Runs in AIPerf's venv (tokenizers, transformers; no torch): `python aiperf_tokenizer.py HUB_CACHE_DIR`, then
`HF_HUB_CACHE=HUB_CACHE_DIR HF_HUB_OFFLINE=1 aiperf profile --tokenizer kvtier/tiny-tokenizer ...`. AIPerf 0.13.0 loads
a tokenizer offline only from the hub cache (`aiperf/common/tokenizer.py` `_from_pretrained_local` resolves the name
with `snapshot_download(local_files_only=True)`): a plain folder path is refused as an invalid repo id.
"""

from __future__ import annotations

import sys
from pathlib import Path

NAME = "kvtier/tiny-tokenizer"
REVISION = "0" * 40  # a commit id of the cache's layout; nothing is downloaded
SPECIAL = ["<unk>", "<s>", "</s>"]


def build(hub: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [" ".join(f"w{i}" for i in range(start, start + 50)) for start in range(0, 2000, 50)]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=32768
    )
    repo = hub / f"models--{NAME.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    fast.save_pretrained(snapshot)
    return snapshot


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: aiperf_tokenizer.py HUB_CACHE_DIR", file=sys.stderr)
        return 2
    print(f"tokenizer {NAME} written to {build(Path(argv[0]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
