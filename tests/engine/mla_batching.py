"""Experiment (issue 36, docs/l2.md "MLA after a hit on vLLM-CPU"): one tiny model on vLLM-CPU, no KV connector, the
engine tests' 1,025-token prompt prefilled at once or in chunks; prints the 16 greedy token ids as one JSON line.

Runs in the engine venv, under the engine lock (it starts an engine in this process, about 15 s):
    flock /tmp/kvtier-engine.lock .venv-engine/bin/python tests/engine/mla_batching.py MODEL_DIR CHUNK ROPE BLOCK
MODEL_DIR: a tiny model built by tiny_model.py; CHUNK: 0 (the whole prompt in one step) or the tokens per prefill
step; ROPE: `kernel` (vLLM-CPU's rotary kernel, what `--enforce-eager` runs) or `native` (vLLM's PyTorch rotary
embedding, `custom_ops: ["-rotary_embedding"]`); BLOCK: 16 for MLA, 32 for the GQA models. vLLM-CPU turns chunked
prefill off for MLA without AMX (vllm/platforms/cpu.py); for CHUNK > 0 this turns it back on after the platform's
check, so the same prompt reaches the attention with part of it already cached, as after a connector's load.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

PROMPT_TOKENS, OUTPUT_TOKENS = 4 * 256 + 1, 16  # as tests/engine/model_kinds.py
PROMPT_SEED = "kvtier-engine-prompt:20261201"  # scenario.prompt_ids(MODEL_SEED): this venv does not import kvtier


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[2] not in ("kernel", "native"):
        print("usage: mla_batching.py MODEL_DIR CHUNK kernel|native BLOCK", file=sys.stderr)
        return 2
    model, chunk, rope, block = argv[0], int(argv[1]), argv[2], int(argv[3])
    os.environ |= {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.platforms.cpu import CpuPlatform

    platform_check = CpuPlatform.check_and_update_config.__func__

    def chunked(cls: type[CpuPlatform], vllm_config: Any) -> None:
        platform_check(cls, vllm_config)
        if chunk:
            vllm_config.scheduler_config.enable_chunked_prefill = True
            vllm_config.scheduler_config.max_num_batched_tokens = chunk

    CpuPlatform.check_and_update_config = classmethod(chunked)
    extra: dict[str, Any] = {"compilation_config": {"custom_ops": ["-rotary_embedding"]}} if rope == "native" else {}
    llm = LLM(
        model=model,
        max_model_len=32768,
        block_size=block,
        enforce_eager=True,
        dtype="bfloat16",
        enable_prefix_caching=False,
        **extra,
    )
    rng = random.Random(PROMPT_SEED)
    prompt = TokensPrompt(prompt_token_ids=[rng.randrange(3, 2048) for _ in range(PROMPT_TOKENS)])
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=OUTPUT_TOKENS, ignore_eos=True))[0]
    print(json.dumps({"chunk": chunk, "rope": rope, "token_ids": list(out.outputs[0].token_ids)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
