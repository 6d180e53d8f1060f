"""`kvtier bench compare A.json B.json`: the same numbers from two result files, side by side, with differences.

Units are the summary's (ms, %, MiB). Different workloads, or runs made with different settings, are named before
any number: a difference in TTFT means little when the runs did not send the same load.
"""

from __future__ import annotations

from typing import Any

from kvtier.bench.result import BenchResult
from kvtier.bench.terminal import TIER_NAMES, WIDTH, Column, printable, render, wrap

# Settings that differ between any two runs by design: not worth a warning.
_EXPECTED_TO_DIFFER = {"salt", "metrics_urls"}
_MIB = 1 << 20


def _metrics(percentiles: tuple[float, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """(label, path into a run summary): counts, latencies per chosen percentile, throughput, goodput."""
    out: list[tuple[str, tuple[str, ...]]] = [("requests", ("requests",)), ("ok", ("ok",)), ("errors", ("errors",))]
    for metric, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
        out += [(f"{metric} p{q:g} ms", (key, f"p{q:g}")) for q in percentiles]
    out += [("req/s", ("request_throughput",)), ("output tok/s", ("output_token_throughput",))]
    out += [("good %", ("goodput", "good_fraction")), ("good req/s", ("goodput", "request_goodput"))]
    return out


def _get(data: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = data
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) * (100 if path[-1] == "good_fraction" else 1)


def _row(section: str, metric: str, a: float | None, b: float | None) -> dict[str, Any]:
    delta = b - a if a is not None and b is not None else None
    ratio = b / a if a and b is not None else None
    return {"section": section, "metric": metric, "a": a, "b": b, "delta": delta, "ratio": ratio}


def settings_differences(a: BenchResult, b: BenchResult) -> list[dict[str, Any]]:
    keys = sorted((set(a.settings) | set(b.settings)) - _EXPECTED_TO_DIFFER)
    return [
        {"setting": k, "a": a.settings.get(k), "b": b.settings.get(k)}
        for k in keys
        if a.settings.get(k) != b.settings.get(k)
    ]


def compare(a: BenchResult, b: BenchResult) -> dict[str, Any]:
    sa, sb = a.summaries(), b.summaries()
    percentiles = tuple(q for q in a.percentiles if q in b.percentiles) or (50.0,)
    rows = []
    for run in [r for r in sa if r in sb]:
        for label, path in _metrics(percentiles):
            va, vb = _get(sa[run], path), _get(sb[run], path)
            if va is not None or vb is not None:
                rows.append(_row(f"run {run}", label, va, vb))
    if a.workload == b.workload == "sweep":
        by_length = {r["length"]: r for r in b.details.get("sweep", [])}
        for ra in a.details.get("sweep", []):
            rb = by_length.get(ra["length"])
            if rb is not None:
                section = f"sweep length {ra['length']}"
                rows.append(_row(section, "cold TTFT ms", ra["cold_ttft_ms"], rb["cold_ttft_ms"]))
                rows.append(_row(section, "reused TTFT ms", ra["reused_ttft_ms"], rb["reused_ttft_ms"]))
                rows.append(_row(section, "speedup x", ra["speedup"], rb["speedup"]))
    rows += _cache_rows(a, b)
    warnings = []
    if a.workload != b.workload:
        warnings.append(
            f"A is a {a.workload} run and B a {b.workload} run: they send different loads, so their numbers "
            "measure different things"
        )
    for side, result in (("A", a), ("B", b)):
        if result.partial:
            warnings.append(f"{side} is a partial run (interrupted): it has fewer requests than planned")
    diffs = settings_differences(a, b)
    if diffs and a.workload == b.workload:
        warnings.append("the runs used different settings: " + ", ".join(d["setting"] for d in diffs))
    return {
        "a": _describe(a),
        "b": _describe(b),
        "warnings": warnings,
        "settings_differences": diffs,
        "only_in_a": [r for r in sa if r not in sb],
        "only_in_b": [r for r in sb if r not in sa],
        "rows": rows,
    }


def _cache_rows(a: BenchResult, b: BenchResult) -> list[dict[str, Any]]:
    """Per pod (matched by URL, else by position): hit tokens and rate per tier, L2 reads and writes."""
    rows = []
    by_url = {r.get("url"): r for r in b.cache}
    for n, ra in enumerate(a.cache):
        rb = by_url.get(ra.get("url")) or (b.cache[n] if n < len(b.cache) else None)
        if rb is None:
            continue
        url = ra.get("url") if ra.get("url") == rb.get("url") else f"{ra.get('url')} | {rb.get('url')}"
        section = f"cache {url}"
        ta, tb = ra.get("tiers", {}), rb.get("tiers", {})
        for key in [k for k in ta if k in tb]:
            name = TIER_NAMES.get(key, key)
            rows.append(_row(section, f"{name} hit tokens", ta[key].get("hit_tokens"), tb[key].get("hit_tokens")))
            rows.append(_row(section, f"{name} hit %", _percent(ta[key]), _percent(tb[key])))
        ia, ib = ra.get("l2_io", {}), rb.get("l2_io", {})
        for key in sorted(set(ia) & set(ib)):
            scale = _MIB if key.endswith("bytes") else 1
            label = f"L2 {key.replace('_', ' ').replace('bytes', 'MiB')}"
            rows.append(_row(section, label, ia[key] / scale, ib[key] / scale))
    return rows


def _percent(tier: dict[str, Any]) -> float | None:
    rate = tier.get("hit_rate")
    return rate * 100 if isinstance(rate, int | float) else None


def _describe(result: BenchResult) -> dict[str, Any]:
    return {
        "workload": result.workload,
        "label": result.label,
        "started_at": result.started_at,
        "salt": result.settings.get("salt"),
        "partial": result.partial,
    }


def fmt(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    text = f"{value:+,.2f}" if signed else f"{value:,.2f}"
    return text.removesuffix(".00")


def compare_lines(data: dict[str, Any], names: tuple[str, str], wide: bool = False) -> list[str]:
    """The comparison as text: who A and B are, warnings, differing settings, then one table per section."""
    width = None if wide else WIDTH
    lines: list[str] = []
    for side, name in zip(("a", "b"), names, strict=True):
        d = data[side]
        # Strings from the files are escaped: a label holding "\x1b[31m" must not recolour the terminal.
        lines += wrap(printable(f"{side.upper()} = {name} ({d['workload']}, {d['label'] or d['salt']})"), width)
    for warning in data["warnings"]:
        lines += wrap(printable(warning), width, "warning: ")
    for diff in data["settings_differences"]:
        lines += wrap(f"{diff['setting']}: A {diff['a']!r}, B {diff['b']!r}", width, "  ")
    columns = [Column("metric", left=True), Column("A"), Column("B"), Column("B - A"), Column("B / A", optional=True)]
    sections: dict[str, list[list[str]]] = {}
    for row in data["rows"]:
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-"
        cells = [row["metric"], fmt(row["a"]), fmt(row["b"]), fmt(row["delta"], signed=True), ratio]
        sections.setdefault(row["section"], []).append(cells)
    for section, rows in sections.items():
        lines += ["", *wrap(printable(section), width)]
        lines += render(columns, rows, width)
    for side in ("a", "b"):
        if data[f"only_in_{side}"]:
            lines += wrap(printable(f"runs only in {side.upper()}: {', '.join(data[f'only_in_{side}'])}"), width)
    return lines
