"""Recording rules and alerts, as Prometheus rule groups (the body of a PrometheusRule and of a promtool rule file).

Per endpoint and LOB (labels `lob`, `kvtier_endpoint`, added by the scrape objects):
- L0: vLLM's prompt tokens from the local prefix cache (`source="local_cache_hit"`);
- L1 + L2 together: vLLM's `external_kv_transfer` tokens (LMCache as vLLM sees it);
- L2: LMCache's remote read bytes over the model's KV bytes per token (LMCache 0.4.3 counts no L2 hit tokens; with
  the naive serde a stored token weighs exactly its KV); L1 = external minus L2. Whether an L2 hit was written by
  another replica is not in any counter: `kvtier verify --probe` proves that path instead.
Platform groups need no LOB file (they aggregate by label), so adding a LOB never touches the platform stack; each
LOB stack carries its own constants (KV bytes per token) and the alerts that need its endpoint list.
"""

from __future__ import annotations

from typing import Any

from kvtier.catalog import resolve_model
from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.k8s.curvine import names as curvine
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.k8s.observability import metrics as m
from kvtier.serving import L2_CLAIM

Rule = dict[str, Any]
BY_ENDPOINT = f"{m.LOB}, {m.ENDPOINT}"
KV_BYTES_PER_TOKEN = "lob_endpoint:kvtier_kv_bytes_per_token:constant"
RUNBOOK = "docs/observability.md#"  # one runbook paragraph per alert, anchored by its lowercased name


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


def _rate_by_endpoint(metric: str, selector: str = "", window: str = "5m") -> str:
    return f"sum by ({BY_ENDPOINT}) (rate({metric}{{{selector}}}[{window}]))"


def tier_records() -> list[Rule]:
    """Token rates and hit rates per tier, per endpoint and per LOB."""
    prompt = "lob_endpoint:kvtier_prompt_tokens:rate5m"
    l0 = "lob_endpoint:kvtier_l0_hit_tokens:rate5m"
    external = "lob_endpoint:kvtier_external_hit_tokens:rate5m"
    l2_bytes = "lob_endpoint:kvtier_l2_read_bytes:rate5m"
    l2 = "lob_endpoint:kvtier_l2_hit_tokens:rate5m"
    l1 = "lob_endpoint:kvtier_l1_hit_tokens:rate5m"
    records = [
        _record(prompt, _rate_by_endpoint(m.VLLM_PROMPT_TOKENS_BY_SOURCE)),
        _record(l0, _rate_by_endpoint(m.VLLM_PROMPT_TOKENS_BY_SOURCE, f'source="{m.SOURCE_L0}"')),
        _record(external, _rate_by_endpoint(m.VLLM_PROMPT_TOKENS_BY_SOURCE, f'source="{m.SOURCE_EXTERNAL}"')),
        _record(l2_bytes, _rate_by_endpoint(m.LMCACHE_REMOTE_READ_BYTES)),
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
                f"histogram_quantile({quantile}, sum by ({BY_ENDPOINT}, le) (rate({m.VLLM_TTFT_BUCKET}[5m])))",
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


def platform_alerts(env: Environment) -> list[Rule]:
    obs = env.observability
    ns = f'namespace="{curvine.NAMESPACE}"'
    slo_s = obs.ttft_p90_slo_ms / 1000
    return [
        _alert(
            "KvtierFusePodRestarted",
            f'increase({m.KSM_CONTAINER_RESTARTS}{{{ns}, container="curvine-fuse"}}[15m]) > 0',
            "0m",
            "critical",
            "A Curvine FUSE pod restarted: every L2 mount on its node broke and must be re-established",
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
            f'{m.KSM_STATEFULSET_READY}{{{ns}, statefulset="{curvine.MASTER}"}} < {env.curvine.masters}',
            "5m",
            "critical",
            f"Fewer than {env.curvine.masters} Curvine masters are ready",
        ),
        _alert(
            "KvtierL2OverBudget",
            "lob:kvtier_l2_used_of_budget:ratio > 1",
            "30m",
            "warning",
            "A line of business uses more L2 than its budget_gb: the janitor is not keeping up or not running",
        ),
        _alert(
            "KvtierJanitorStale",
            f"time() - max by ({m.LOB}) ({m.JANITOR_LAST_SUCCESS}) > 3600",
            "0m",
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
            "KvtierKyvernoPolicyNotReady",
            f'max by (policy_name) ({m.KYVERNO_RULE_INFO}{{policy_name="{POLICY_NAME}", status_ready="false"}}) > 0',
            "10m",
            "critical",
            "kvtier's Kyverno Policy is not ready: new operator pods start without their L2 rewiring",
        ),
        _alert(
            "KvtierTtftSloBreached",
            f"lob_endpoint:vllm_ttft_seconds:p90_5m > {slo_s:g}",
            "10m",
            "warning",
            f"An endpoint's TTFT p90 is above the {obs.ttft_p90_slo_ms} ms SLO",
        ),
    ]


def platform_groups(env: Environment) -> list[dict[str, Any]]:
    return [
        {"name": "kvtier-tiers", "rules": tier_records()},
        {"name": "kvtier-storage", "rules": storage_records()},
        {"name": "kvtier-alerts", "rules": platform_alerts(env)},
    ]


def long_prompts_flowing(env: Environment, lob: str, endpoints: str) -> str:
    """Requests per second with more than `long_prompt_tokens` prompt tokens (a bucket boundary of vLLM's 1-2-5
    prompt-length histogram, formatted as prometheus_client writes `le`)."""
    le = f"{float(env.observability.long_prompt_tokens)}"
    hist = m.VLLM_REQUEST_PROMPT_TOKENS
    sel = f'{m.LOB}="{lob}", {m.ENDPOINT}=~"{endpoints}"'
    return (
        f"(sum by ({BY_ENDPOINT}) (rate({hist}_count{{{sel}}}[10m]))"
        f' - sum by ({BY_ENDPOINT}) (rate({hist}_bucket{{{sel}, le="{le}"}}[10m])))'
    )


def lob_groups(env: Environment, lob: LineOfBusiness) -> list[dict[str, Any]]:
    """The LOB's constants and the alerts that need its endpoint list (which endpoints have an L2)."""
    constants = [
        _record(
            KV_BYTES_PER_TOKEN,
            f"vector({resolve_model(e.model.id, lob.models).kv_bytes_per_token})",
            {m.LOB: lob.name, m.ENDPOINT: e.name},
        )
        for e in lob.endpoints
    ]
    groups: list[dict[str, Any]] = [{"name": f"kvtier-{lob.name}-constants", "rules": constants}]
    with_l2 = sorted(e.name for e in lob.endpoints if e.cache.l2 != "none")
    with_curvine = sorted(e.name for e in lob.endpoints if e.cache.l2 == "curvine")
    alerts: list[Rule] = []
    if with_l2:
        pattern = "|".join(with_l2)
        flowing = long_prompts_flowing(env, lob.name, pattern)
        hits = "lob_endpoint:kvtier_l2_hit_tokens:rate5m"
        alerts.append(
            _alert(
                "KvtierL2SilentMiss",
                f'({hits}{{{m.LOB}="{lob.name}", {m.ENDPOINT}=~"{pattern}"}} or on ({BY_ENDPOINT}) (0 * {flowing}))'
                f" == 0 and on ({BY_ENDPOINT}) ({flowing} > 0)",
                "30m",
                "critical",
                f"Long prompts reach an L2 endpoint of {lob.name} but nothing is read from L2 (seed, URL, mount?)",
            )
        )
    if with_curvine:
        pattern = "|".join(with_curvine)
        engines = f'{m.VLLM_REQUESTS_RUNNING}{{{m.LOB}="{lob.name}", {m.ENDPOINT}=~"{pattern}"}}'
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
