"""Grafana dashboards as data, built with grafana-foundation-sdk (Grafana 11.6 schema; pin in requirements.txt).

Two dashboards read only kvtier's recording rules and the Curvine series, with template variables for the LOB and
the endpoint, so one definition serves every environment and LOB: an environment overview (per-LOB hit rates per
tier, TTFT p50/p90, L2 usage against budget, Curvine health) and an endpoint view.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import GraphDrawStyle
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos, VariableRefresh

from kvtier.k8s.observability import metrics as m
from kvtier.k8s.observability.rules import ADAPTER_STATES, adapter_record

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# The drop-downs read a series every engine generation exports (vLLM 0.11.1, 0.19.0, 0.32.0), from engines only.
VARIABLE_SERIES = f'{m.VLLM_REQUESTS_RUNNING}{{{m.COMPONENT}="{m.ENGINE_COMPONENT}"}}'
ENDPOINT_VARIABLE_SERIES = f'{m.VLLM_REQUESTS_RUNNING}{{{m.COMPONENT}="{m.ENGINE_COMPONENT}", {m.LOB}="$lob"}}'
# Endpoints with LoRA adapters only (issue 35): vLLM exports which adapters run or wait, not their requests or hits.
ADAPTER_PANEL = "LoRA adapters: replicas running / waiting each"
OVERVIEW_UID = "kvtier-overview"
ENDPOINT_UID = "kvtier-endpoint"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    """One panel: what the JSON and the docs' plot of the same panels are both drawn from."""

    title: str
    unit: str  # Grafana unit: percentunit, s, bytes, short
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "stat"


def _ratio(record: str, legend: str, selector: str) -> Query:
    return Query(f"{record}{{{selector}}}", legend)


def _tier_hits(title: str, scope: str, selector: str, legend: str) -> PanelSpec:
    """Hit rate of L0, L1 and L2 from the `scope` (lob or lob_endpoint) recording rules; `legend` prefixes the tier."""
    return PanelSpec(
        title,
        "percentunit",
        tuple(_ratio(f"{scope}:kvtier_{t}_hit:ratio5m", f"{legend}{t.upper()}", selector) for t in ("l0", "l1", "l2")),
    )


def _ttft(title: str, selector: str, legend: str) -> PanelSpec:
    """TTFT p50 and p90 per endpoint; `legend` prefixes the quantile."""
    return PanelSpec(
        title,
        "s",
        tuple(Query(f"lob_endpoint:vllm_ttft_seconds:{q}_5m{{{selector}}}", f"{legend}{q}") for q in ("p50", "p90")),
    )


def overview_panels() -> list[PanelSpec]:
    lob = 'lob=~"$lob"'
    return [
        PanelSpec(
            "Prompt tokens served from a cache, by LOB",
            "percentunit",
            (Query(f"lob:kvtier_cached_prompt_tokens:ratio5m{{{lob}}}", "{{lob}}"),),
        ),
        _tier_hits("Hit rate per tier (token share of prompts)", "lob", lob, "{{lob}} "),
        _ttft("TTFT p50 / p90 by endpoint", lob, "{{lob}}/{{kvtier_endpoint}} "),
        PanelSpec(
            "L2 used vs budget, by LOB",
            "bytes",
            (
                Query(f"lob:kvtier_l2_used:bytes{{{lob}}}", "{{lob}} used"),
                Query(f"lob:kvtier_l2_budget:bytes{{{lob}}}", "{{lob}} budget"),
            ),
        ),
        PanelSpec(
            "Janitor deletions (bytes/s, 1 h)",
            "Bps",
            (Query(f"lob_reason:kvtier_janitor_deleted_bytes:rate1h{{{lob}}}", "{{lob}} {{reason}}"),),
        ),
        PanelSpec(
            "Curvine pool used",
            "percentunit",
            (Query("kvtier:curvine_pool_used:ratio", "pool"),),
            "stat",
        ),
        PanelSpec(
            "Curvine live workers",
            "short",
            (Query('max(worker_num{kvtier_component="master", tag="live"})', "live workers"),),
            "stat",
        ),
        PanelSpec(
            "Curvine scrape targets up",
            "short",
            (Query('sum by (kvtier_component) (up{kvtier_component=~"master|worker|fuse"})', "{{kvtier_component}}"),),
        ),
    ]


def endpoint_panels() -> list[PanelSpec]:
    sel = 'lob="$lob", kvtier_endpoint="$endpoint"'
    engines = f'{sel}, {m.COMPONENT}="{m.ENGINE_COMPONENT}"'  # raw LMCache series: the engines' own
    return [
        _tier_hits("Hit rate per tier", "lob_endpoint", sel, ""),
        PanelSpec(
            "Prompt tokens/s by source",
            "short",
            (
                Query(f"lob_endpoint:kvtier_prompt_tokens:rate5m{{{sel}}}", "all prompt tokens"),
                Query(f"lob_endpoint:kvtier_l0_hit_tokens:rate5m{{{sel}}}", "L0 GPU"),
                Query(f"lob_endpoint:kvtier_l1_hit_tokens:rate5m{{{sel}}}", "L1 CPU"),
                Query(f"lob_endpoint:kvtier_l2_hit_tokens:rate5m{{{sel}}}", "L2 Curvine"),
            ),
        ),
        _ttft("TTFT p50 / p90", sel, ""),
        PanelSpec(
            "LMCache retrieve / store latency p90",
            "s",
            tuple(
                Query(
                    f"histogram_quantile(0.9, sum by (le) (rate(lmcache:time_to_{op}_bucket{{{engines}}}[5m])))",
                    f"{op} p90",
                )
                for op in ("retrieve", "store")
            ),
        ),
        PanelSpec(
            "L2 read / write bytes/s",
            "Bps",
            (
                Query(f"lob_endpoint:kvtier_l2_read_bytes:rate5m{{{sel}}}", "read"),
                Query(f"sum(rate(lmcache:num_remote_write_bytes_total{{{engines}}}[5m]))", "write"),
            ),
        ),
        PanelSpec(
            "L1 CPU cache used per pod",
            "bytes",
            (Query(f"sum by (pod) (lmcache:local_cache_usage{{{engines}}})", "{{pod}}"),),
        ),
        PanelSpec(
            ADAPTER_PANEL,
            "short",
            tuple(Query(f"{adapter_record(s)}{{{sel}}}", f"{{{{adapter}}}} {s}") for s in ADAPTER_STATES),
        ),
    ]


def _panel(spec: PanelSpec, index: int) -> Any:
    width, height = 12, 8
    grid = GridPos(h=height, w=width, x=(index % 2) * width, y=(index // 2) * height)

    if spec.kind == "stat":
        panel: Any = stat.Panel()
    else:
        panel = timeseries.Panel().draw_style(GraphDrawStyle.LINE).fill_opacity(10)
    panel = panel.title(spec.title).unit(spec.unit).datasource(DATASOURCE).grid_pos(grid)
    for i, q in enumerate(spec.queries):
        panel = panel.with_target(
            prometheus.Dataquery().expr(q.expr).legend_format(q.legend).ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
        )
    return panel


def _variables(board: dashboard.Dashboard, *, endpoint: bool) -> dashboard.Dashboard:
    board = board.with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    board = board.with_variable(
        dashboard.QueryVariable("lob")
        .label("Line of business")
        .datasource(DATASOURCE)
        .query(f"label_values({VARIABLE_SERIES}, {m.LOB})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(not endpoint)
        .include_all(not endpoint)
    )
    if endpoint:
        board = board.with_variable(
            dashboard.QueryVariable("endpoint")
            .label("Endpoint")
            .datasource(DATASOURCE)
            .query(f"label_values({ENDPOINT_VARIABLE_SERIES}, {m.ENDPOINT})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        )
    return board


def _dashboard(uid: str, title: str, panels: list[PanelSpec], *, endpoint: bool) -> dict[str, Any]:
    board = (
        dashboard.Dashboard(title).uid(uid).tags(["kvtier"]).refresh("30s").time("now-6h", "now").timezone("browser")
    )
    board = _variables(board, endpoint=endpoint)
    for i, spec in enumerate(panels):
        board = board.with_panel(_panel(spec, i))
    data: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(board.build()))
    return data


def dashboards() -> dict[str, dict[str, Any]]:
    """File name -> Grafana dashboard JSON."""
    return {
        f"{OVERVIEW_UID}.json": _dashboard(
            OVERVIEW_UID, "kvtier: environment overview", overview_panels(), endpoint=False
        ),
        f"{ENDPOINT_UID}.json": _dashboard(ENDPOINT_UID, "kvtier: endpoint", endpoint_panels(), endpoint=True),
    }
