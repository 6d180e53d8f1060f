"""A real Prometheus (Debian's `prometheus` package) scraping kvtier's bench test server on 127.0.0.1 and evaluating
kvtier's recording rules, while a small workload runs: cold prompts to server A, the same to B (L2 hits through
the shared store), then again to A (GPU-cache hits). Used by tests/k8s/observability/test_prometheus.py, and run by hand
to draw the endpoint dashboard's panels over the test server (docs/img/observability-endpoint.png is drawn the same
way from real engines by tests/engine/signals.py):

    .venv/bin/python scripts/observability_demo.py observability-demo.png

Prometheus listens on 127.0.0.1 only, runs at most `PROMETHEUS_BUDGET_S` and is stopped by its PID on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from kvtier.bench.client import send
from kvtier.bench.http import new_client
from kvtier.bench.prompts import PromptMaker, new_salt
from kvtier.bench.records import Request, request_body
from kvtier.bench.testserver import (
    BYTES_PER_TOKEN,
    Behaviour,
    FakeCluster,
    free_port,
    stop_process,
    wait_until_answering,
)
from kvtier.k8s.observability.dashboards import PanelSpec, endpoint_panels
from kvtier.k8s.observability.rules import KV_BYTES_PER_TOKEN, tier_records

LOB, ENDPOINT = "demo", "fake"
PROMETHEUS_BUDGET_S = 180
FAKE = Behaviour(cold_s=0.05, l2_s=0.02, warm_s=0.01, itl_s=0.0, output_tokens=2)


def write_config(folder: Path, targets: list[str], port: int) -> Path:
    """prometheus.yml: 1 s scrapes of the fake servers with the labels kvtier's PodMonitors add, and the rules."""
    rules = folder / "kvtier.rules.yaml"
    constants = {
        "record": KV_BYTES_PER_TOKEN,
        "expr": f"vector({BYTES_PER_TOKEN})",
        "labels": {"lob": LOB, "kvtier_endpoint": ENDPOINT},
    }
    groups = [{"name": "tiers", "rules": tier_records()}, {"name": "constants", "rules": [constants]}]
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "kvtier-engines",
                "static_configs": [
                    {
                        "targets": [t.removeprefix("http://") for t in targets],
                        "labels": {"lob": LOB, "kvtier_endpoint": ENDPOINT, "kvtier_component": "engine"},
                    }
                ],
            },
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
        ],
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.contextmanager
def prometheus(folder: Path, config: Path, port: int) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise FileNotFoundError("prometheus is not installed (apt-get install prometheus)")
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    log = (folder / "prometheus.log").open("wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(proc, f"{url}/-/ready", folder / "prometheus.log", "prometheus")
        yield url
    finally:
        stop_process(proc)
        log.close()


Say = Callable[[str], None]
PROGRESS_EVERY = 5  # rounds between progress lines: a run by hand says what it does (it took 36 s in silence)


def quiet(_line: str) -> None:
    """The default `say`: tests need no progress lines."""


async def workload(urls: list[str], rounds: int, pause_s: float, say: Say = quiet) -> None:
    """Per round one new 512-word prompt: to A (cold, stored), to B (from the shared L2), to A again (GPU cache)."""
    maker = PromptMaker(0, new_salt())
    a, b = urls
    async with new_client(30.0) as client:
        for i in range(rounds):
            text = " ".join(maker.header(f"demo {i}") + maker.words(f"demo:{i}", 512))
            body = request_body("completions", FAKE.model, text, 2)
            for url in (a, b, a):
                await send(client, Request("demo", url, "completions", body, i), timeout_s=30, origin=0.0)
            if (i + 1) % PROGRESS_EVERY == 0 or i + 1 == rounds:
                say(f"workload: round {i + 1} of {rounds} sent")
            await asyncio.sleep(pause_s)


def wait_for_targets(url: str, count: int, timeout_s: float = 30.0) -> None:
    """Until Prometheus has scraped all `count` engine targets once: it is ready seconds before its first scrape (seen
    here: a workload started at once ended before it, and rate() then saw flat counters and the ratios no series)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        targets = httpx.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        scraped = [t for t in targets if t["labels"].get("job") == "kvtier-engines" and t["health"] == "up"]
        if len(scraped) == count:
            return
        time.sleep(0.5)
    raise TimeoutError(f"prometheus did not scrape the {count} test servers within {timeout_s:g} s")


def query_range(url: str, expr: str, start: float, end: float) -> list[tuple[float, float]]:
    resp = httpx.get(
        f"{url}/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": 1}, timeout=10
    )
    resp.raise_for_status()
    result = resp.json()["data"]["result"]
    return [(float(t), float(v)) for t, v in result[0]["values"]] if result else []


def instant(url: str, expr: str) -> float | None:
    resp = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    resp.raise_for_status()
    result = resp.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def panel_exprs(panel: PanelSpec, lob: str = LOB, endpoint: str = ENDPOINT) -> list[tuple[str, str]]:
    """The panel's queries with the dashboard variables set to one endpoint (the demo's by default)."""
    return [(q.legend, q.expr.replace("$lob", lob).replace("$endpoint", endpoint)) for q in panel.queries]


@dataclass
class DemoRun:
    url: str
    start: float
    end: float
    rules: list[dict[str, Any]]


@contextlib.contextmanager
def demo(rounds: int = 20, pause_s: float = 1.0, say: Say = quiet) -> Iterator[DemoRun]:
    """Two fake servers with one shared L2, a real Prometheus scraping them, the workload run to its end; `say` gets
    a line at each step."""
    folder = Path(tempfile.mkdtemp(prefix="kvtier-prom-"))
    try:
        with FakeCluster(2, FAKE) as cluster:
            port = free_port()
            config = write_config(folder, cluster.urls, port)
            say(f"starting Prometheus on 127.0.0.1:{port}, scraping {len(cluster.urls)} test servers")
            with prometheus(folder, config, port) as url:
                wait_for_targets(url, len(cluster.urls))
                say(f"workload: {rounds} rounds of 3 requests, {pause_s:g} s apart")
                start = time.time()
                run = workload(cluster.urls, rounds, pause_s, say)
                asyncio.run(asyncio.wait_for(run, PROMETHEUS_BUDGET_S))
                say("waiting 3 s for the last scrapes and rule evaluations")
                time.sleep(3)  # two more scrapes and rule evaluations
                rules = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
                yield DemoRun(url, start, time.time(), rules)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


DEMO_TITLE = (
    "kvtier endpoint dashboard panels, evaluated by Prometheus 2.42 on kvtier's rules (bench test server, shared L2)"
)


# One colour per tier in every panel ("L2" in the hit rates, "L2 Curvine" in the tokens/s): matplotlib's default
# cycle coloured a tier by its place in each panel's list, so L0 was blue in one panel and orange in the next.
TIER_COLOURS = {"L0": "tab:blue", "L1": "tab:orange", "L2": "tab:green"}
OTHER_COLOURS = ("tab:gray", "tab:purple", "tab:brown", "tab:pink")


def series_colour(legend: str, others: list[str]) -> str:
    """The tier's colour for a legend naming a tier (its first word), else the next colour not used by a tier."""
    tier = TIER_COLOURS.get(legend.split(" ", 1)[0])
    if tier is not None:
        return tier
    others.append(legend)
    return OTHER_COLOURS[(len(others) - 1) % len(OTHER_COLOURS)]


def plot(run: DemoRun, out: Path, lob: str = LOB, endpoint: str = ENDPOINT, title: str = DEMO_TITLE) -> Any:
    """Draw the three panels to `out`; returns the matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        p
        for p in endpoint_panels()
        if p.title in ("Hit rate per tier", "Prompt tokens/s by source", "L2 read / write bytes/s")
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    for ax, panel in zip(axes, panels, strict=True):
        others: list[str] = []
        for legend, expr in panel_exprs(panel, lob, endpoint):
            points = query_range(run.url, expr, run.start, run.end)
            if points:
                xs, ys = [t - run.start for t, _ in points], [v for _, v in points]
                ax.plot(xs, ys, label=legend, color=series_colour(legend, others))
        ax.set_title(panel.title)
        ax.set_xlabel("seconds")
        ax.set_ylabel({"percentunit": "share of prompt tokens", "short": "tokens/s", "Bps": "bytes/s"}[panel.unit])
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    return fig


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "observability-demo.png")
    with demo(say=stderr_line) as run:
        stderr_line(f"drawing {target}")
        plot(run, target)
    print(f"wrote {target}")
