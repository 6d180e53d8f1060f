"""Build the engine tests' tiny LoRA adapters offline: random weights on the tiny model, written with `peft`.

Runs in the engine venv (torch, transformers, peft): `python tiny_adapters.py MODEL_DIR OUT_DIR RANK SEED NAME...`
writes one adapter per NAME into OUT_DIR/NAME (adapter_config.json, adapter_model.safetensors), each from its own seed,
so the same arguments give the same files (no hub, no download). PEFT zero-initialises LoRA B by default, which
makes an adapter a no-op: `init_lora_weights=False` keeps the random initialisation of both matrices (peft 0.21.0
`tuners/lora/layer.py` `reset_lora_parameters`), so each adapter changes what the model computes. The adapters
touch every attention projection, k_proj and v_proj included, so an adapter's KV differs from the base model's from
the first layer on (what the isolation tests need: KV computed with other weights).
"""

from __future__ import annotations

import sys
from pathlib import Path

TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]


def build(model_dir: Path, out: Path, rank: int, seed: int, names: list[str]) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    for index, name in enumerate(names):
        base = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.bfloat16)
        torch.manual_seed(seed + index)
        config = LoraConfig(
            r=rank, lora_alpha=2 * rank, target_modules=TARGET_MODULES, init_lora_weights=False, bias="none"
        )
        model = get_peft_model(base, config)
        model.save_pretrained(out / name, safe_serialization=True)


def main(argv: list[str]) -> int:
    if len(argv) < 5:
        print("usage: tiny_adapters.py MODEL_DIR OUT_DIR RANK SEED NAME...", file=sys.stderr)
        return 2
    model_dir, out, rank, seed, names = Path(argv[0]), Path(argv[1]), int(argv[2]), int(argv[3]), argv[4:]
    build(model_dir, out, rank, seed, names)
    print(f"adapters {', '.join(names)} written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
