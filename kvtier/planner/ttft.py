"""The one TTFT model: `kvtier plan`, `kvtier validate` (the break-even) and `kvtier simulate` all call it.

The time to first token of a prompt of N tokens of which a prefix is cached (docs/planning.md, "One TTFT model"):
- prefill of the tokens not cached: FLOPs(N) - FLOPs(cached) at the replica's effective FLOPS (the cached prefix
  still costs attention in the rest), plus the forward pass's floor (every weight read once at the GPU's memory
  bandwidth: issue 36's refit); vLLM computes at least the last token, so at most N - 1 tokens are cached;
- L1 hits: their KV over PCIe; L0 hits: free;
- L2 hits: their bytes at the node's read rate (shared by the L2 loads in flight on the node), plus a per-hit
  overhead (the catalog's `l2_hit_fixed_s` of the instance type: LMCache's lookup of each chunk through FUSE and the
  retrieve's synchronisation), once per request that reads L2;
- what LMCache stores: whole chunks only with kvtier's `save_unfull_chunk: false`, so a reader of a prompt another
  replica prefilled hits N // chunk x chunk tokens (all N with `save_unfull_chunk: true`, as in the AWS/Curvine blog).
Decode is not part of TTFT: a measurement with several output tokens adds (output - 1) decode steps to both the cold
and the cached request (the calibration test adds them back to compare with the blog).
"""

from __future__ import annotations

from typing import NamedTuple

from kvtier.planner.model import TierModel

_new = tuple.__new__


class Ttft(NamedTuple):
    """One request's TTFT in its parts (seconds)."""

    prefill_s: float  # recomputing what no tier held
    l1_read_s: float
    l2_read_s: float  # the L2 hit's bytes over the network
    l2_overhead_s: float  # the per-hit part beyond the bytes (0 without an L2 hit)

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.l1_read_s + self.l2_read_s + self.l2_overhead_s


def stored_tokens(prompt_tokens: int, chunk_tokens: int, save_unfull_chunk: bool) -> int:
    """Tokens of a prompt LMCache stores (and so another replica can hit): whole chunks, or all of them."""
    if save_unfull_chunk:
        return prompt_tokens
    return prompt_tokens // chunk_tokens * chunk_tokens


def ttft(model: TierModel, tokens: int, l0: int = 0, l1: int = 0, l2: int = 0, l2_readers: int = 1) -> Ttft:
    """TTFT of a prompt of `tokens` tokens whose first l0 + l1 + l2 tokens hit those tiers (in that order).

    At most tokens - 1 are used (vLLM recomputes the last one; LMCache logs "need to load: N - 1"); the excess comes
    off the deepest tier hit. `l2_readers` L2 loads on the node, this one included, share its network.
    """
    excess = l0 + l1 + l2 - max(tokens - 1, 0)
    if excess > 0:
        cut = min(excess, l2)
        l2 -= cut
        excess -= cut
        cut = min(excess, l1)
        l1 -= cut
        l0 -= excess - cut
    cached = l0 + l1 + l2
    prefill = model.compute_seconds(tokens, cached)
    # tuple.__new__: a NamedTuple's own constructor is a Python function; the simulator calls this once a request
    if l2 <= 0:
        return _new(Ttft, (prefill, model.l1_load_seconds(l1) if l1 else 0.0, 0.0, 0.0))
    return _new(
        Ttft,
        (
            prefill,
            model.l1_load_seconds(l1) if l1 else 0.0,
            model.l2_read_seconds(l2, l2_readers),
            model.l2_hit_fixed_s,
        ),
    )


def cold_ttft(model: TierModel, tokens: int) -> Ttft:
    """Nothing cached: the whole prompt is prefilled."""
    return ttft(model, tokens)


def l2_hit_ttft(model: TierModel, tokens: int) -> Ttft:
    """The prompt another replica prefilled, read from L2 by a replica that holds none of it (one reader)."""
    return ttft(model, tokens, l2=stored_tokens(tokens, model.chunk_tokens, model.save_unfull_chunk))


def l2_speedup(model: TierModel, tokens: int) -> float:
    """Cold TTFT over the TTFT of an L2 hit of the same prompt (above 1: L2 pays off)."""
    return cold_ttft(model, tokens).total_s / l2_hit_ttft(model, tokens).total_s
