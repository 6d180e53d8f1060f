"""The per-endpoint tier model shared by `kvtier plan` and `kvtier simulate`, so the two never disagree."""

from __future__ import annotations

import math
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
    l2_load_s_per_token: float  # seconds to bring one token's KV from L2 (network/NVMe bound); inf without L2
    prefill_s_per_token: float  # linear part of recomputing a prompt
    prefill_s_per_token_squared: float  # attention part, grows with prompt length
    max_model_len: int

    def prefill_seconds(self, tokens: int) -> float:
        """Time to recompute `tokens` prompt tokens from scratch."""
        return self.prefill_s_per_token * tokens + self.prefill_s_per_token_squared * tokens * tokens

    def l1_load_seconds(self, tokens: int) -> float:
        return self.l1_load_s_per_token * tokens

    def l2_load_seconds(self, tokens: int) -> float:
        return self.l2_load_s_per_token * tokens

    @property
    def has_l2(self) -> bool:
        return self.l2_tokens > 0 and math.isfinite(self.l2_load_s_per_token)

    def l2_break_even_tokens(self) -> int | None:
        """The shortest cached prefix (a whole number of chunks) whose L2 load beats recomputing it; None: never.

        Loading is linear in the prefix (a x N) and recomputing is b x N + q x N^2, so L2 wins once
        N > (a - b) / q; LMCache stores whole chunks only, so the answer is at least one chunk.
        """
        if not self.has_l2:
            return None
        a, b, q = self.l2_load_s_per_token, self.prefill_s_per_token, self.prefill_s_per_token_squared
        chunk = self.chunk_tokens
        if a < b + q * chunk:
            return chunk
        if q <= 0:
            return None
        crossing = (a - b) / q  # L2 wins strictly above this prefix length
        return (math.floor(crossing / chunk) + 1) * chunk
