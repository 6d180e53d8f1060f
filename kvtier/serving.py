"""How an endpoint is served, as facts the connectors, charts, planner, simulator and benchmark share whichever L2
connector runs: the L2 mount path, the hash seed, the L2 identity's format, pinned host memory, the router's session
header and kv-aware threshold. What differs between connectors lives in kvtier/connectors/. Plain Python: nothing
here imports cdk8s, constructs or charts, so every layer above config may import it.

Host memory: `cache.l1_gb` is per replica, split over its tensor-parallel ranks (kvtier/connectors/lmcache.py says
why for LMCache; vLLM's CPU tier divides `cpu_bytes_to_use` among them too).
"""

from __future__ import annotations

from kvtier.catalog import LMCACHE_STAGING_GIB
from kvtier.config.endpoint import CacheConfig

# Both connectors store whole units only (one L2 file per LMCache chunk or vLLM block; the last partial one of a
# prompt is recomputed by the next reader): rendered into every LMCache endpoint, and the planner and simulator count
# hits with it.
SAVE_UNFULL_CHUNK = False
# Where pods mount their LOB's L2 volume (design "L2 layout").
L2_MOUNT_PATH = "/mnt/kvtier/l2"
L2_CLAIM = "l2-cache"
L2_VOLUME = "kvtier-l2"
# Cache keys use Python hashing: every pod sharing L2 needs the same seed (curvine-lmcache.md 2.5).
HASH_SEED = "0"
# With L1 off LMCache still stages L2 transfers in pinned host memory (LocalCPUBackend with local_cpu=False); GiB per
# replica, like l1_gb (the catalog's fact, which the planner also counts).
L2_STAGING_GB = LMCACHE_STAGING_GIB.value
# Marks the vLLM container of an operator pod whose L2 Kyverno rewires to Curvine (read by the per-LOB Policy).
L2_MARKER = "KVTIER_L2_BACKEND"
# The endpoint's L2 identity on that container: the Policy builds the URL from it and the pod's `app` label.
L2_IDENTITY_VAR = "KVTIER_L2_IDENTITY"
L2_IDENTITY_CHARS = 12  # hex digits of SHA-256: 48 bits, so two identities of one endpoint never meet by chance
# Bumped only when the meaning of an existing fact changes; a new optional fact needs no bump, because unset facts
# are left out of the digest (docs/l2.md "One directory per model build"). 3 (issues 34-36, one bump for the round):
# request tags (cache_salt, LoRA adapter) in LMCache keys, image digests, adapters and the model catalog's facts.
L2_IDENTITY_SCHEMA = 3
GIB = 1024**3
# LMCache's and prometheus_client's multi-process metrics: the API server must see the engine's files.
PROMETHEUS_DIR = "/tmp"
# kvaware (operator mode, whose router is not kvtier's): the simulator's model falls back (session key, else QPS) when
# the best pod matched fewer than len(prompt) - this many tokens, production-stack's `--kv-aware-threshold` default
# (vllm-project/production-stack@a6c01db src/vllm_router/parsers/parser.py; docs/references.md "production-stack
# router"); here so that the simulator and the CLI share it.
KV_AWARE_THRESHOLD = 2000
# The header the standalone router's `session` (and kvaware's fallback) routing hashes (its --session-key), and the
# one `kvtier bench shared-prefix` sends by default.
SESSION_HEADER = "x-session-id"
# The standalone router's (vllm-router 0.1.17) counter of the requests each replica served, label `worker` (its
# URL), on its Prometheus port: `kvtier bench --router-metrics-url` reads which replica served each request from it.
ROUTER_SERVED_METRIC = "vllm_router_processed_requests_total"
ROUTER_WORKER_LABEL = "worker"


def l1_pinned_gib(cache: CacheConfig) -> float:
    """Host memory LMCache pins in one replica, in GiB (all its ranks together): `l1_gb`, or the L2 staging buffer
    when L1 is off and an L2 is on. Pod memory requests and the planner's node-RAM check count this."""
    if cache.l1_gb > 0:
        return float(cache.l1_gb)
    return L2_STAGING_GB if cache.l2 != "none" else 0.0


def hash_seed_env() -> dict[str, str]:
    return {"name": "PYTHONHASHSEED", "value": HASH_SEED}
