"""The L2 engine benchmark's model, built in the engine venv: tests/engine/tiny_model.py's dense Llama (its tokenizer,
seed and builder) with the KV shape of a real endpoint's model, so the files an L2 hit reads are as large as that
endpoint's (`python -m tools.benchl2 --mode engines`, tools/l2engines.py).

    .venv-engine/bin/python tools/l2model.py OUT_DIR SEED CORPUS_FILE LAYERS KV_HEADS HEAD_DIM

The KV cache per token is LAYERS x 2 x KV_HEADS x HEAD_DIM x 2 bytes (bf16), as the real model's; everything that does
not change those bytes is small so that a CPU prefills it in seconds: a 256-wide residual stream, as many query
heads as KV heads (attention work grows with the query heads, the KV bytes do not), the tiny model's vocabulary.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script in the engine venv: the repository's tests package

from tests.engine import tiny_model  # noqa: E402 (after the path)


def shape(layers: int, kv_heads: int, head_dim: int) -> dict[str, int]:
    """tiny_model's dense shape with the KV cache of `layers` x `kv_heads` x `head_dim`."""
    return {
        **tiny_model.SHAPE,
        "num_hidden_layers": layers,
        "num_attention_heads": kv_heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        print("usage: l2model.py OUT_DIR SEED CORPUS_FILE LAYERS KV_HEADS HEAD_DIM", file=sys.stderr)
        return 2
    out, seed, corpus = Path(argv[0]), int(argv[1]), Path(argv[2]).read_text(encoding="utf-8").splitlines()
    wanted = shape(int(argv[3]), int(argv[4]), int(argv[5]))
    # tiny_model builds each kind from its module-level SHAPES; this process builds one model only.
    tiny_model.SHAPES = {**tiny_model.SHAPES, "dense": wanted}
    tiny_model.build(out, seed, corpus, "dense")
    print(f"L2 benchmark model ({wanted['num_hidden_layers']} layers x {wanted['num_key_value_heads']} KV heads x "
          f"{wanted['head_dim']}) written to {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
