"""The per-endpoint tier model shared by `kvtier plan` and `kvtier simulate`, so the two never disagree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TierModel:
    """Capacities and speeds of one endpoint's cache tiers (per replica unless said otherwise)."""

    kv_bytes_per_token: int
    chunk_tokens: int  # LMCache chunk size (one L2 file)
    block_tokens: int  # vLLM block size (L0 granularity)
    replicas: int
    l0_tokens: int  # GPU prefix cache per replica
    l1_tokens: int  # LMCache CPU DRAM per replica
    l2_tokens: int  # the endpoint's share of its LOB's L2 budget, shared by all replicas
    l1_load_s_per_token: float  # seconds to bring one token's KV from L1 to the GPU
    l2_load_s_per_token: float  # seconds to bring one token's KV from L2 (network/NVMe bound)
    prefill_s_per_token: float  # linear part of recomputing a prompt
    prefill_s_per_token_squared: float  # attention part, grows with prompt length
    max_model_len: int

    def prefill_seconds(self, tokens: int) -> float:
        """Time to recompute `tokens` prompt tokens from scratch."""
        return self.prefill_s_per_token * tokens + self.prefill_s_per_token_squared * tokens * tokens
