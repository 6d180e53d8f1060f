"""A real Prometheus (Debian's `prometheus`) evaluates kvtier's rules over two engines' series and answers each
autoscaling query exactly as kvtier renders it for KEDA, through the same HTTP API KEDA's prometheus scaler calls
(`/api/v1/query`): one sample per endpoint (the scaler refuses more than one) with the signal's value.

The two engines are a small exporter on 127.0.0.1 serving fixed rates (vLLM 0.19+ names): queues of 3 and 5, 600
of 1,000 prompt tokens a minute prefilled and 200 read from L2 by each, every TTFT between 2.5 s and 5 s. Prometheus
listens on 127.0.0.1, runs for a bounded time and is stopped by its PID on every path (scripts/observability_demo.py).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from kvtier.bench.testserver import free_port
from kvtier.catalog import resolve_model
from kvtier.config.endpoint import Signal
from kvtier.k8s.autoscaling import signal_query
from kvtier.k8s.observability.rules import SIGNAL_RECORDS, lob_groups, platform_groups
from kvtier.rules import load_checked
from scripts.observability_demo import prometheus
from tests.k8s.observability.test_prometheus import _prometheus as require_prometheus
from tests.support import CONFIG_DIR

DEV = load_checked(CONFIG_DIR, "dev")
LOB = DEV.lobs[0]
ENDPOINT = LOB.endpoints[0]
KV = resolve_model(ENDPOINT.model.id, LOB.models).kv_bytes_per_token
QUEUES = (3, 5)
PER_MINUTE = {"local_compute": 600, "local_cache_hit": 100, "external_kv_transfer": 300}
L2_TOKENS_PER_MINUTE = 200
TTFT_PER_MINUTE = 60  # requests a minute, each TTFT between 2.5 s and 5 s
ANSWER_WITHIN_S = 60.0


def _metrics(queue: int, minutes: float) -> str:
    labels = 'model_name="m",engine="0"'
    lines = [f"vllm:num_requests_waiting{{{labels}}} {queue}"]
    for source, rate in PER_MINUTE.items():
        lines.append(f'vllm:prompt_tokens_by_source_total{{{labels},source="{source}"}} {rate * minutes}')
    lines.append(f"vllm:prompt_tokens_total{{{labels}}} {sum(PER_MINUTE.values()) * minutes}")
    lines.append(f"lmcache:num_remote_read_bytes_total{{{labels}}} {L2_TOKENS_PER_MINUTE * KV * minutes}")
    served = TTFT_PER_MINUTE * minutes
    for le, count in (("2.5", 0.0), ("5.0", served), ("+Inf", served)):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {count}')
    return "\n".join(lines) + "\n"


@contextmanager
def _engines() -> Iterator[list[str]]:
    """Two exporters whose counters grow at the rates above from now on; shut down on every path."""
    start = time.monotonic()
    servers = []
    for queue in QUEUES:

        class Handler(BaseHTTPRequestHandler):
            waiting = queue

            def do_GET(self) -> None:
                body = _metrics(self.waiting, (time.monotonic() - start) / 60).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:  # quiet: pytest shows failures, not every scrape
                return

        server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    try:
        yield [f"127.0.0.1:{s.server_address[1]}" for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _config(folder: Path, targets: list[str], port: int) -> Path:
    rules = folder / "kvtier.rules.yaml"
    groups = [*platform_groups(DEV.env), *lob_groups(DEV.env, LOB)]
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    labels = {"lob": LOB.name, "kvtier_endpoint": ENDPOINT.name, "kvtier_component": "engine"}
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "engines", "static_configs": [{"targets": targets, "labels": labels}]}],
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _keda_query(url: str, query: str) -> list[float]:
    """What KEDA's prometheus scaler reads: the instant vector's values (it accepts exactly one)."""
    resp = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10)
    resp.raise_for_status()
    return [float(sample["value"][1]) for sample in resp.json()["data"]["result"]]


# Exact: the gauge, and the TTFT ratio (a quantile of rates: the rates' scale cancels). The two token rates come out
# low while the series are younger than rate()'s 5-minute window (it divides by the window); their ratio is exact.
EXACT: dict[Signal, float] = {
    "queue_per_replica": sum(QUEUES),
    "ttft_p90_over_slo": 4.75 / (DEV.env.observability.ttft_p90_slo_ms / 1000),  # p90 interpolated in [2.5, 5]
}
L2_OVER_COMPUTED = L2_TOKENS_PER_MINUTE / PER_MINUTE["local_compute"]


def _all_right(got: dict[Signal, list[float]]) -> bool:
    if not got or any(len(values) != 1 for values in got.values()):
        return False
    exact = all(got[s][0] == pytest.approx(value, rel=0.05) for s, value in EXACT.items())
    computed, l2 = got["computed_tokens_per_replica"][0], got["l2_hit_tokens_per_replica"][0]
    return exact and computed > 0 and l2 / computed == pytest.approx(L2_OVER_COMPUTED, rel=0.05)


def test_prometheus_answers_every_rendered_signal_query_with_one_sample() -> None:
    require_prometheus()
    folder = Path(tempfile.mkdtemp(prefix="kvtier-keda-"))
    try:
        with _engines() as targets:
            port = free_port()
            with prometheus(folder, _config(folder, targets, port), port) as url:
                got: dict[Signal, list[float]] = {}
                deadline = time.monotonic() + ANSWER_WITHIN_S
                # rate() needs a few scrapes before it settles: ask until every answer is right, or the deadline.
                while time.monotonic() < deadline and not _all_right(got):
                    time.sleep(1)
                    got = {s: _keda_query(url, signal_query(LOB.name, ENDPOINT.name, s)) for s in SIGNAL_RECORDS}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert set(got) == set(SIGNAL_RECORDS), got
    assert all(len(values) == 1 for values in got.values()), got  # KEDA refuses an answer of several samples
    for signal, value in EXACT.items():
        assert got[signal][0] == pytest.approx(value, rel=0.05), (signal, got[signal], value)
    computed, l2 = got["computed_tokens_per_replica"][0], got["l2_hit_tokens_per_replica"][0]
    assert computed > 0 and l2 / computed == pytest.approx(L2_OVER_COMPUTED, rel=0.05), (computed, l2)
