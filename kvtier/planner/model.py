"""The per-endpoint tier model shared by `kvtier plan`, `kvtier validate` and `kvtier simulate`, so they never disagree."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvtier.serving import SAVE_UNFULL_CHUNK


@dataclass(frozen=True)
class TierModel:
    """Capacities and speeds of one endpoint's cache tiers (per replica unless said otherwise).

    An L2 hit costs `l2_hit_fixed_s + l2_load_s_per_token x tokens x readers`: a per-hit overhead (LMCache's lookup
    of each chunk over FUSE, retrieve synchronisation) and the bytes, every one of which crosses the network
    (Curvine places chunks round-robin over the nodes, docs/planning.md), at the node's NIC share: `readers` L2
    loads running at once on one node split its bandwidth. kvtier/planner/ttft.py puts the parts together.
    """

    kv_bytes_per_token: int
    chunk_tokens: int  # tokens per L2 file: LMCache's chunk, or vLLM's block on its own connector
    block_tokens: int  # vLLM block size (L0 granularity)
    replicas: int
    l0_tokens: int  # GPU prefix cache per replica
    l1_tokens: int  # LMCache CPU DRAM per replica
    l2_tokens: int  # the endpoint's share of its LOB's L2 budget, shared by all replicas
    l1_load_s_per_token: float  # seconds to bring one token's KV from L1 to the GPU
    l2_load_s_per_token: float  # seconds to bring one token's KV from L2 (network bound, one reader); inf without L2
    prefill_s_per_token: float  # linear part of recomputing a prompt
    prefill_s_per_token_squared: float  # attention part, grows with prompt length
    max_model_len: int
    l2_hit_fixed_s: float = 0.0  # seconds an L2 hit costs beyond its bytes (per request that reads L2)
    replicas_per_node: int = 1  # replicas that share one node's NIC (GPUs per node / tensor_parallel)
    save_unfull_chunk: bool = SAVE_UNFULL_CHUNK  # LMCache stores the last partial chunk too (kvtier renders False)
    chunk_unit: str = (
        "LMCache chunk"  # what one L2 file is, for reports (its connector's `file_unit`, kvtier/connectors/)
    )

    # A forward pass reads every weight once (its GPUs' share, at their memory bandwidth): the floor of any prefill,
    # the cold one and an L2 hit's last token alike (issue 36's refit, docs/planning.md "One TTFT model").
    forward_floor_s: float = 0.0

    def prefill_seconds(self, tokens: int) -> float:
        """Time to recompute `tokens` prompt tokens from scratch (one forward pass)."""
        return self.compute_seconds(tokens, 0)

    def compute_seconds(self, tokens: int, cached: int) -> float:
        """One forward pass over the last `tokens - cached` of `tokens` prompt tokens (the cached prefix still costs
        attention): the weights' read floor plus the FLOPs; nothing to compute costs nothing."""
        if tokens <= cached:
            return 0.0
        linear = self.prefill_s_per_token * (tokens - cached)
        return self.forward_floor_s + linear + self.prefill_s_per_token_squared * (tokens * tokens - cached * cached)

    def l1_load_seconds(self, tokens: int) -> float:
        return self.l1_load_s_per_token * tokens

    def l2_read_seconds(self, tokens: int, readers: int = 1) -> float:
        """The bytes of `tokens` tokens over the node's NIC, shared by `readers` loads (this one included)."""
        if tokens <= 0:
            return 0.0
        return self.l2_load_s_per_token * tokens * max(readers, 1)

    def l2_load_seconds(self, tokens: int, readers: int = 1) -> float:
        """One L2 hit of `tokens` tokens: the per-hit overhead plus its bytes."""
        if tokens <= 0:
            return 0.0
        return self.l2_hit_fixed_s + self.l2_read_seconds(tokens, readers)

    @property
    def has_l2(self) -> bool:
        return self.l2_tokens > 0 and math.isfinite(self.l2_load_s_per_token)

    def l2_break_even_tokens(self) -> int | None:
        """The shortest cached prefix (a whole number of chunks) whose L2 load beats recomputing it; None: never.

        Loading costs F + a x N and recomputing b x N + q x N^2, so L2 wins where q N^2 + (b - a) N - F > 0, i.e.
        above the positive root of that quadratic; LMCache stores whole chunks only, so the answer is at least one
        chunk.
        """
        if not self.has_l2:
            return None
        a, b, q = self.l2_load_s_per_token, self.prefill_s_per_token, self.prefill_s_per_token_squared
        fixed = self.l2_hit_fixed_s
        chunk = self.chunk_tokens
        slope = b - a
        root = math.sqrt(slope * slope + 4 * q * fixed) if q > 0 else abs(slope)
        if slope > 0:
            crossing = 2 * fixed / (slope + root)  # the same root, without cancellation when q is tiny
        elif q > 0:
            crossing = (root - slope) / (2 * q)
        else:
            return None
        if not math.isfinite(crossing):
            return None
        if crossing < chunk:
            return chunk
        return (math.floor(crossing / chunk) + 1) * chunk  # L2 wins strictly above the crossing
