"""Recording rules and alerts, as Prometheus rule groups (the body of a PrometheusRule and of a promtool rule file).

Per endpoint and LOB (labels `lob`, `kvtier_endpoint`, added by the scrape objects), from engine series only
(`kvtier_component="engine"`: the router exports some `vllm:*` series too and carries the endpoint label):
- prompt tokens, L0 and L1 + L2 together, per engine generation (docs/references.md "Signals per engine generation
  (issue 23)"): vLLM 0.19 and 0.32 count them by source (`vllm:prompt_tokens_by_source_total`, at prefill); vLLM
  0.11.1, the operator image's, has only `vllm:prompt_tokens_total`, `vllm:prefix_cache_hits_total` (L0) and
  `vllm:external_prefix_cache_hits_total` (LMCache). Each record takes the by-source series where an endpoint has
  them, `or` the 0.11 ones;
- L2: LMCache's remote read bytes over the model's KV bytes per token (LMCache 0.4.3 counts no L2 hit tokens; with
  the naive serde a stored token weighs exactly its KV); L1 = external minus L2. Whether an L2 hit was written by
  another replica is not in any counter: `kvtier verify --probe` proves that path instead.
Platform groups need no LOB file (they aggregate by label), so adding a LOB never touches the platform stack; each
LOB stack carries its own constants (KV bytes per token) and the alerts that need its endpoint list.

Severities: `critical` pages, for user-visible harm or a risk to data (L2 writes failing: a dead mount; Curvine
below quorum; a pod that escaped the L2 rewiring); everything else is `warning`. Every alert has a `for:` longer than
a routine restart, and no expression is true because a process just started (JanitorStale ignores a janitor that
has not finished its first pass yet, SilentMiss needs repeated lookups).
"""

from __future__ import annotations

import copy
from typing import Any

from kvtier.catalog import as_served, resolve_model
from kvtier.config.endpoint import Signal
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.connectors import CONNECTORS
from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.observability import metrics as m
from kvtier.serving import L2_CLAIM

Rule = dict[str, Any]
BY_ENDPOINT = f"{m.LOB}, {m.ENDPOINT}"
ENGINES = f'{m.COMPONENT}="{m.ENGINE_COMPONENT}"'
KV_BYTES_PER_TOKEN = "lob_endpoint:kvtier_kv_bytes_per_token:constant"
RUNBOOK = "docs/observability.md#"  # one runbook paragraph per alert, anchored by its lowercased name
SILENT_MISS_WINDOW = "30m"
SILENT_MISS_MIN_LOOKUPS = 10  # LMCache lookups in the window before "every lookup missed" means anything
LMCACHE_PUBLISH_S = 10  # LMCache publishes its counters every 10 s (docs/references.md, issue 13)
FUSE_POD = "curvine-csi-standalone-.*"  # the CSI node plugin's FUSE pods (docs/references.md)


def _record(name: str, expr: str, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


def _alert(name: str, expr: str, for_: str, severity: str, summary: str) -> Rule:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "team": "kvtier"},
        "annotations": {"summary": summary, "runbook": RUNBOOK + name.lower()},
    }


def with_for(groups: list[dict[str, Any]], for_: str) -> list[dict[str, Any]]:
    """Test-only: the same groups with every alert's `for:` set to `for_`, so a run of minutes can see an alert fire
    (tests/engine/signals.py). Shipped files never go through it: they keep the durations above."""
    out = copy.deepcopy(groups)
    for group in out:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = for_
    return out


def _engine_sum(metric: str, selector: str = "", window: str = "5m", fn: str = "rate") -> str:
    inner = ", ".join(s for s in (ENGINES, selector) if s)
    return f"sum by ({BY_ENDPOINT}) ({fn}({metric}{{{inner}}}[{window}]))"


def _by_generation(by_source: str | None, legacy: str) -> str:
    """vLLM 0.19+ by-source series where the endpoint has them, else vLLM 0.11's counter (per endpoint)."""
    newer = _engine_sum(m.VLLM_PROMPT_TOKENS_BY_SOURCE, by_source or "")
    return f"{newer} or {_engine_sum(legacy)}"


def tier_records() -> list[Rule]:
    """Token rates and hit rates per tier, per endpoint and per LOB."""
    prompt = "lob_endpoint:kvtier_prompt_tokens:rate5m"
    l0 = "lob_endpoint:kvtier_l0_hit_tokens:rate5m"
    external = "lob_endpoint:kvtier_external_hit_tokens:rate5m"
    l2_bytes = "lob_endpoint:kvtier_l2_read_bytes:rate5m"
    l2 = "lob_endpoint:kvtier_l2_hit_tokens:rate5m"
    l1 = "lob_endpoint:kvtier_l1_hit_tokens:rate5m"
    records = [
        _record(prompt, _by_generation(None, m.VLLM_PROMPT_TOKENS)),
        _record(l0, _by_generation(f'source="{m.SOURCE_L0}"', m.VLLM_PREFIX_CACHE_HITS)),
        _record(external, _by_generation(f'source="{m.SOURCE_EXTERNAL}"', m.VLLM_EXTERNAL_PREFIX_CACHE_HITS)),
        # L2 reads of any connector (an endpoint runs one): LMCache's remote reads, or vLLM's own fs tier.
        _record(
            l2_bytes,
            " or ".join(_engine_sum(c.hits.l2_read_bytes.name, c.hits.l2_read_bytes.matchers) for c in CONNECTORS),
        ),
        _record(l2, f"{l2_bytes} / on ({BY_ENDPOINT}) {KV_BYTES_PER_TOKEN}"),
        _record(l1, f"clamp_min({external} - on ({BY_ENDPOINT}) {l2}, 0)"),
    ]
    for tier, tokens in (("l0", l0), ("l1", l1), ("l2", l2)):
        records.append(
            _record(f"lob_endpoint:kvtier_{tier}_hit:ratio5m", f"{tokens} / on ({BY_ENDPOINT}) ({prompt} > 0)")
        )
    records.append(
        _record(
            "lob_endpoint:kvtier_cached_prompt_tokens:ratio5m",
            f"({l0} + on ({BY_ENDPOINT}) {external}) / on ({BY_ENDPOINT}) ({prompt} > 0)",
        )
    )
    for tier, tokens in (("l0", l0), ("l1", l1), ("l2", l2)):
        records.append(
            _record(
                f"lob:kvtier_{tier}_hit:ratio5m",
                f"sum by ({m.LOB}) ({tokens}) / (sum by ({m.LOB}) ({prompt}) > 0)",
            )
        )
    records.append(
        _record(
            "lob:kvtier_cached_prompt_tokens:ratio5m",
            f"(sum by ({m.LOB}) ({l0}) + sum by ({m.LOB}) ({external})) / (sum by ({m.LOB}) ({prompt}) > 0)",
        )
    )
    for quantile in ("0.5", "0.9"):
        label = f"p{int(float(quantile) * 100)}"
        records.append(
            _record(
                f"lob_endpoint:vllm_ttft_seconds:{label}_5m",
                f"histogram_quantile({quantile}, sum by ({BY_ENDPOINT}, le) (rate({m.VLLM_TTFT_BUCKET}{{{ENGINES}}}[5m])))",
            )
        )
    return records


def storage_records() -> list[Rule]:
    """L2 bytes per LOB against its budget, janitor deletions, and the Curvine pool's usage."""
    master = f'{m.COMPONENT}="master"'
    return [
        _record("lob:kvtier_l2_used:bytes", f"max by ({m.LOB}) ({m.JANITOR_USED_BYTES})"),
        _record("lob:kvtier_l2_budget:bytes", f"max by ({m.LOB}) ({m.JANITOR_BUDGET_BYTES})"),
        _record(
            "lob:kvtier_l2_used_of_budget:ratio",
            f"lob:kvtier_l2_used:bytes / on ({m.LOB}) (lob:kvtier_l2_budget:bytes > 0)",
        ),
        _record(
            "lob_reason:kvtier_janitor_deleted_bytes:rate1h",
            f"sum by ({m.LOB}, reason) (rate({m.JANITOR_DELETED_BYTES}[1h]))",
        ),
        _record(
            "lob_reason:kvtier_janitor_deleted_files:rate1h",
            f"sum by ({m.LOB}, reason) (rate({m.JANITOR_DELETED_FILES}[1h]))",
        ),
        _record(
            "kvtier:curvine_pool_used:ratio",
            f"max({m.CURVINE_FS_USED}{{{master}}}) / (max({m.CURVINE_CAPACITY}{{{master}}}) > 0)",
        ),
    ]


def _gpu_nodes(env: Environment) -> int:
    return sum(g.count for g in env.groups("gpu"))


def _quorum(masters: int) -> int:
    return masters // 2 + 1


def l2_writes_failing(scrape_interval_s: int) -> str:
    """Per engine (`instance`): LMCache stored chunks and not one L2 write succeeded since. LMCache puts every stored
    chunk to its remote backend and counts a remote write only when the put returned (a failed put is only logged:
    its `put_failed_count` gauge is a callback that multiprocess metrics do not export, seen on the real engines).
    The stores are looked at `lag` earlier, so a put that LMCache publishes one interval (10 s) later, seen one or two
    scrapes later, is never taken for a failure."""
    lag_s = LMCACHE_PUBLISH_S + 2 * scrape_interval_s
    by = f"{BY_ENDPOINT}, instance"
    stored = f"sum by ({by}) (increase({m.LMCACHE_STORED_TOKENS}{{{ENGINES}}}[5m] offset {lag_s}s))"
    written = f"sum by ({by}) (increase({m.LMCACHE_REMOTE_WRITE_REQUESTS}{{{ENGINES}}}[{300 + lag_s}s]))"
    return f"{stored} > 0 and on ({by}) {written} == 0"


def platform_alerts(env: Environment) -> list[Rule]:
    obs = env.observability
    ns = f'namespace="{curvine.NAMESPACE}"'
    slo_s = obs.ttft_p90_slo_ms / 1000
    masters, quorum = env.curvine.masters, _quorum(env.curvine.masters)
    ready = f'{m.KSM_STATEFULSET_READY}{{{ns}, statefulset="{curvine.MASTER}"}}'
    last_pass = m.JANITOR_LAST_SUCCESS
    alerts = [
        _alert(
            "KvtierL2WritesFailing",
            l2_writes_failing(obs.scrape_interval_s),
            "5m",
            "critical",
            "LMCache's writes to the L2 mount fail on an endpoint: the mount is dead or missing, L2 serves nothing",
        ),
        _alert(
            "KvtierFusePodRestarted",
            f'increase({m.KSM_CONTAINER_RESTARTS}{{{ns}, container="curvine-fuse"}}[15m]) > 0',
            "5m",
            "warning",
            "A Curvine FUSE pod restarted: the L2 mounts on its node broke and the healer restarts the pods using them",
        ),
        _alert(
            # The CSI recreates a FUSE pod after repeated restarts (new name, new uid): two FUSE pods on one node
            # within 30 minutes. A restart counter cannot see it, the new pod's series starts at 0.
            "KvtierFusePodRecreated",
            f'count by (node) (max_over_time({m.KSM_POD_INFO}{{{ns}, pod=~"{FUSE_POD}"}}[30m])) > 1',
            "5m",
            "warning",
            "A Curvine FUSE pod was recreated on a node: its L2 mounts broke and the healer restarts the pods using them",
        ),
        _alert(
            "KvtierGpuNodeWithoutCurvineWorker",
            f'{m.KSM_DAEMONSET_READY}{{{ns}, daemonset="{curvine.WORKER}"}} '
            f'< {m.KSM_DAEMONSET_DESIRED}{{{ns}, daemonset="{curvine.WORKER}"}}'
            f' or max({m.CURVINE_WORKER_NUM}{{{m.COMPONENT}="master", tag="live"}}) < {_gpu_nodes(env)}',
            "10m",
            "warning",
            f"A GPU node has no ready Curvine worker (expected {_gpu_nodes(env)} live workers)",
        ),
        _alert(
            "KvtierCurvineMasterNotReady",
            f"{ready} < {quorum}",
            "5m",
            "critical",
            f"Fewer than {quorum} of {masters} Curvine masters are ready: no Raft majority, L2 is down",
        ),
    ]
    if masters > quorum:
        alerts.append(
            _alert(
                "KvtierCurvineMasterDegraded",
                f"{ready} < {masters} and {ready} >= {quorum}",
                "15m",
                "warning",
                f"Fewer than {masters} Curvine masters are ready; the majority keeps L2 up",
            )
        )
    alerts += [
        _alert(
            "KvtierL2OverBudget",
            "lob:kvtier_l2_used_of_budget:ratio > 1",
            "30m",
            "warning",
            "A line of business uses more L2 than its budget_gb: the janitor is not keeping up or not running",
        ),
        _alert(
            # The newest pass any janitor of the LOB reported within the hour: a restarted janitor shows 0 until its
            # first pass ends, and its predecessor's series still counts. `offset 1h`: the LOB had a janitor an hour
            # ago, so a first deploy is not stale before it had an hour.
            "KvtierJanitorStale",
            f"time() - max by ({m.LOB}) (max_over_time({last_pass}[1h])) > 3600"
            f" and on ({m.LOB}) count by ({m.LOB}) ({last_pass} offset 1h)",
            "5m",
            "warning",
            "The L2 janitor of a line of business has not finished a pass for over an hour",
        ),
        _alert(
            "KvtierPoolNearlyFull",
            f"kvtier:curvine_pool_used:ratio > {obs.pool_usage_alert_fraction:g}",
            "15m",
            "warning",
            f"The Curvine pool is over {obs.pool_usage_alert_fraction:.0%} full",
        ),
        _alert(
            "KvtierTtftSloBreached",
            f"lob_endpoint:vllm_ttft_seconds:p90_5m > {slo_s:g}",
            "10m",
            "warning",
            f"An endpoint's TTFT p90 is above the {obs.ttft_p90_slo_ms} ms SLO",
        ),
    ]
    return alerts


# The autoscaling signals (issue 27; docs/endpoints.md "Autoscaling"): one series per endpoint, labels lob and
# kvtier_endpoint. The per-replica ones are totals: KEDA's AverageValue target divides by the replica count.
SIGNAL_RECORDS: dict[Signal, str] = {
    "queue_per_replica": "lob_endpoint:kvtier_requests_waiting:sum",
    "ttft_p90_over_slo": "lob_endpoint:kvtier_ttft_p90_over_slo:ratio5m",
    "computed_tokens_per_replica": "lob_endpoint:kvtier_computed_prompt_tokens:rate5m",
    "l2_hit_tokens_per_replica": "lob_endpoint:kvtier_l2_hit_tokens:rate5m",  # a tier record (tier_records)
}


def signal_records(env: Environment) -> list[Rule]:
    """Requests waiting, TTFT p90 over the environment's SLO, and prompt tokens prefilled (no tier held them): vLLM
    0.19+ counts them by source (`local_compute`); vLLM 0.11 as prompt - L0 hits - connector hits."""
    slo_s = env.observability.ttft_p90_slo_ms / 1000
    computed = f'source="{m.SOURCE_COMPUTE}"'
    legacy_cached = (
        f"{_engine_sum(m.VLLM_PREFIX_CACHE_HITS)} + on ({BY_ENDPOINT}) {_engine_sum(m.VLLM_EXTERNAL_PREFIX_CACHE_HITS)}"
    )
    legacy = f"clamp_min({_engine_sum(m.VLLM_PROMPT_TOKENS)} - on ({BY_ENDPOINT}) ({legacy_cached}), 0)"
    return [
        _record(
            SIGNAL_RECORDS["queue_per_replica"], f"sum by ({BY_ENDPOINT}) ({m.VLLM_REQUESTS_WAITING}{{{ENGINES}}})"
        ),
        _record(SIGNAL_RECORDS["ttft_p90_over_slo"], f"lob_endpoint:vllm_ttft_seconds:p90_5m / {slo_s:g}"),
        _record(
            SIGNAL_RECORDS["computed_tokens_per_replica"],
            f"{_engine_sum(m.VLLM_PROMPT_TOKENS_BY_SOURCE, computed)} or {legacy}",
        ),
    ]


def platform_groups(env: Environment) -> list[dict[str, Any]]:
    return [
        {"name": "kvtier-tiers", "rules": tier_records()},
        {"name": "kvtier-storage", "rules": storage_records()},
        {"name": "kvtier-alerts", "rules": platform_alerts(env)},
        {"name": "kvtier-signals", "rules": signal_records(env)},
    ]


def long_prompts_flowing(env: Environment, lob: str, endpoints: str) -> str:
    """Requests per second with more than `long_prompt_tokens` prompt tokens (a bucket boundary of vLLM's 1-2-5
    prompt-length histogram, formatted as prometheus_client writes `le`): shorter prompts may hold no full chunk, and
    then every LMCache lookup misses by design."""
    le = f"{float(env.observability.long_prompt_tokens)}"
    hist = m.VLLM_REQUEST_PROMPT_TOKENS
    sel = f'{ENGINES}, {m.LOB}="{lob}", {m.ENDPOINT}=~"{endpoints}"'
    return (
        f"(sum by ({BY_ENDPOINT}) (rate({hist}_count{{{sel}}}[10m]))"
        f' - sum by ({BY_ENDPOINT}) (rate({hist}_bucket{{{sel}, le="{le}"}}[10m])))'
    )


def silent_miss(env: Environment, lob: str, endpoints: str) -> str:
    """An L2 endpoint whose LMCache lookups keep missing (at least SILENT_MISS_MIN_LOOKUPS, not one hit, L1 included)
    while it writes to L2: what replicas that cannot read each other's chunks look like (another hash seed, serde,
    chunk size or directory). A hot prefix served from L0/L1, one replica, or prompts that stop coming are not it:
    a hot prefix is a lookup hit, and no lookups is no alert. Only while prompts longer than `long_prompt_tokens` flow
    (a shorter one may hold no full chunk). Failing writes are KvtierL2WritesFailing instead."""
    sel = f'{m.LOB}="{lob}", {m.ENDPOINT}=~"{endpoints}"'
    w = SILENT_MISS_WINDOW
    return (
        f"{_engine_sum(m.LMCACHE_LOOKUP_REQUESTS, sel, w, 'increase')} >= {SILENT_MISS_MIN_LOOKUPS}"
        f" and on ({BY_ENDPOINT}) {_engine_sum(m.LMCACHE_LOOKUP_HITS, sel, w, 'increase')} == 0"
        f" and on ({BY_ENDPOINT}) {_engine_sum(m.LMCACHE_REMOTE_WRITE_BYTES, sel, w, 'increase')} > 0"
        f" and on ({BY_ENDPOINT}) ({long_prompts_flowing(env, lob, endpoints)} > 0)"
        f" unless on ({BY_ENDPOINT}) ({l2_writes_failing(env.observability.scrape_interval_s)})"
    )


ADAPTER_STATES = {"running": m.LORA_RUNNING, "waiting": m.LORA_WAITING}


def adapter_record(state: str) -> str:
    return f"lob_endpoint_adapter:kvtier_lora_{state}:replicas"


def adapter_records(env: Environment, lob: LineOfBusiness) -> list[Rule]:
    """Per LoRA adapter of each endpoint (issue 35), how many replicas run it now, and how many hold requests of it
    waiting (for a free adapter slot, `lora.max_loras`, or for the batch). vLLM exports no per-adapter counter, only
    `vllm:lora_requests_info`: one series per combination of adapters, its value the time the engine last saw it
    (every scheduler step while it serves). A replica runs an adapter when a series naming it is fresher than two
    scrapes; idle engines stop refreshing theirs. Adapter names are RFC 1123 labels, so no regex metacharacter."""
    fresh_s = 2 * env.observability.scrape_interval_s
    records: list[Rule] = []
    for endpoint in lob.endpoints:
        for adapter in endpoint.adapters:
            for state, label in ADAPTER_STATES.items():
                selector = (
                    f'{ENGINES}, {m.LOB}="{lob.name}", {m.ENDPOINT}="{endpoint.name}", '
                    f'{label}=~"(.+,)?{adapter.name}(,.+)?"'
                )
                per_replica = (
                    f"max by ({BY_ENDPOINT}, instance) (time() - {m.VLLM_LORA_INFO}{{{selector}}} < {fresh_s})"
                )
                records.append(
                    _record(
                        adapter_record(state), f"count by ({BY_ENDPOINT}) ({per_replica})", {"adapter": adapter.name}
                    )
                )
    return records


def lob_groups(env: Environment, lob: LineOfBusiness) -> list[dict[str, Any]]:
    """The LOB's constants and the alerts that need its endpoint list (which endpoints have an L2)."""
    constants = [
        _record(
            KV_BYTES_PER_TOKEN,
            f"vector({as_served(resolve_model(e.model.id, lob.models), e.kv_cache_dtype, e.weight_format).kv_bytes_per_token})",
            {m.LOB: lob.name, m.ENDPOINT: e.name},
        )
        for e in lob.endpoints
    ]
    groups: list[dict[str, Any]] = [{"name": f"kvtier-{lob.name}-constants", "rules": constants}]
    adapters = adapter_records(env, lob)
    if adapters:
        groups.append({"name": f"kvtier-{lob.name}-adapters", "rules": adapters})
    with_l2 = sorted(e.name for e in lob.endpoints if e.cache.l2 != "none")
    with_curvine = sorted(e.name for e in lob.endpoints if e.cache.l2 == "curvine")
    alerts: list[Rule] = []
    if with_l2:
        alerts.append(
            _alert(
                "KvtierL2SilentMiss",
                silent_miss(env, lob.name, "|".join(with_l2)),
                "15m",
                "warning",
                f"An L2 endpoint of {lob.name} writes to L2 but every lookup misses (seed, serde, chunk size, directory?)",
            )
        )
    if with_curvine:
        pattern = "|".join(with_curvine)
        engines = f'{m.VLLM_REQUESTS_RUNNING}{{{ENGINES}, {m.LOB}="{lob.name}", {m.ENDPOINT}=~"{pattern}"}}'
        mounted = f'{m.KSM_POD_PVC}{{namespace="kvtier-{lob.name}", persistentvolumeclaim="{L2_CLAIM}"}}'
        alerts.append(
            _alert(
                "KvtierEndpointPodWithoutL2",
                f"group by (namespace, pod, {BY_ENDPOINT}) ({engines}) unless on (namespace, pod) {mounted}",
                "10m",
                "critical",
                f"An endpoint pod of {lob.name} runs without the {L2_CLAIM} volume (Kyverno did not rewire it)",
            )
        )
    if alerts:
        groups.append({"name": f"kvtier-{lob.name}-alerts", "rules": alerts})
    return groups
