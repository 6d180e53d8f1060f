"""Names of the series kvtier's rules read, each from its upstream source (docs/references.md "Observability").

Counters are written with the `_total` suffix that prometheus_client (vLLM, LMCache, the router) adds on exposition.
"""

from __future__ import annotations

# vLLM 0.19.0 (vllm/v1/metrics/loggers.py, stats.py PromptTokenStats): labels model_name, engine (+ source).
VLLM_PROMPT_TOKENS_BY_SOURCE = (
    "vllm:prompt_tokens_by_source_total"  # source: local_compute|local_cache_hit|external_kv_transfer
)
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
VLLM_EXTERNAL_PREFIX_CACHE_QUERIES = "vllm:external_prefix_cache_queries_total"
VLLM_EXTERNAL_PREFIX_CACHE_HITS = "vllm:external_prefix_cache_hits_total"
VLLM_TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"  # histogram, 1-2-5 buckets up to max_model_len
VLLM_REQUESTS_RUNNING = "vllm:num_requests_running"
SOURCE_L0 = "local_cache_hit"
SOURCE_EXTERNAL = "external_kv_transfer"  # LMCache L1 + L2 together

# LMCache 0.4.3 (lmcache/observability.py): labels model_name, worker_id, role (one series per TP rank).
LMCACHE_REQUESTED_TOKENS = "lmcache:num_requested_tokens_total"  # counted only when LMCache retrieves (a hit)
LMCACHE_HIT_TOKENS = "lmcache:num_hit_tokens_total"
LMCACHE_LOOKUP_TOKENS = "lmcache:num_lookup_tokens_total"  # counted on every lookup, a miss included
LMCACHE_LOOKUP_HITS = "lmcache:num_lookup_hits_total"
LMCACHE_REMOTE_READ_BYTES = "lmcache:num_remote_read_bytes_total"  # L2 reads; there is no L2 hit-token counter
LMCACHE_REMOTE_WRITE_BYTES = "lmcache:num_remote_write_bytes_total"
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
KSM_POD_PVC = "kube_pod_spec_volumes_persistentvolumeclaims_info"
KSM_STATEFULSET_READY = "kube_statefulset_status_replicas_ready"
KSM_DAEMONSET_READY = "kube_daemonset_status_number_ready"
KSM_DAEMONSET_DESIRED = "kube_daemonset_status_desired_number_scheduled"

# Kyverno (pkg/metrics/policyruleinfo): 1 per rule; status_ready "false" while the policy is not ready (UNVERIFIED
# label, docs/references.md).
KYVERNO_RULE_INFO = "kyverno_policy_rule_info_total"

# Target labels the scrape objects add (kvtier.k8s.observability.scrape).
LOB = "lob"
ENDPOINT = "kvtier_endpoint"
COMPONENT = "kvtier_component"
NODE = "node"
