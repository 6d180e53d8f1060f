"""The result file of one benchmark: settings, every request, per-run summaries, cache hits per tier."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtier import __version__
from kvtier.bench.metrics import cache_totals
from kvtier.bench.records import RequestRecord
from kvtier.bench.stats import PERCENTILES, summarize
from kvtier.errors import UsageError

FORMAT = "kvtier-bench/1"


@dataclass
class BenchResult:
    workload: str
    started_at: str  # ISO 8601, UTC
    duration_s: float
    settings: dict[str, Any]
    run_order: list[str]
    records: list[RequestRecord]
    cache: list[dict[str, Any]] = field(default_factory=list)  # one report per scraped URL
    details: dict[str, Any] = field(default_factory=dict)  # the workload's own table
    probes: list[dict[str, Any]] = field(default_factory=list)
    label: str | None = None
    interrupted: dict[str, Any] | None = None  # {"signal": "SIGINT", "dropped_in_flight": n} for a partial run

    @property
    def partial(self) -> bool:
        """Stopped by a signal: the records are what finished before it."""
        return self.interrupted is not None

    @property
    def percentiles(self) -> tuple[float, ...]:
        return tuple(float(q) for q in self.settings.get("percentiles") or PERCENTILES)

    @property
    def slo_ms(self) -> dict[str, float] | None:
        slo = self.settings.get("slo_ms")
        return dict(slo) if isinstance(slo, dict) and slo else None

    @property
    def group_by(self) -> str | None:
        """The tag whose values are summarized apart (the sweep's length): percentiles per length, never pooled."""
        tag = self.settings.get("group_by", "length" if self.workload == "sweep" else None)
        return tag if isinstance(tag, str) else None

    def summarize(self, records: list[RequestRecord]) -> dict[str, Any]:
        busy = self.settings.get("throughput_over") == "busy"
        return summarize(records, percentiles=self.percentiles, slo=self.slo_ms, busy=busy)

    def runs(self) -> list[str]:
        """Run names that have requests, in the workload's order (then any others)."""
        present = list(dict.fromkeys(r.run for r in self.records))
        return [r for r in self.run_order if r in present] + [r for r in present if r not in self.run_order]

    def run_records(self, run: str) -> list[RequestRecord]:
        return [r for r in self.records if r.run == run]

    def summaries(self) -> dict[str, dict[str, Any]]:
        """One summary per table row: per run, or per run and group value ("cold 500") when the workload groups."""
        tag = self.group_by
        out: dict[str, dict[str, Any]] = {}
        for run in self.runs():
            records = self.run_records(run)
            if tag is None:
                out[run] = self.summarize(records)
                continue
            for value in dict.fromkeys(r.tags.get(tag) for r in records):
                out[f"{run} {value}"] = {
                    "run": run,
                    tag: value,
                    **self.summarize([r for r in records if r.tags.get(tag) == value]),
                }
        return out

    def run_entries(self) -> list[dict[str, Any]]:
        """The `runs` of the JSON file: per run; a grouped run carries its counts and a summary per group value,
        and no latency percentiles pooled over groups."""
        tag = self.group_by
        entries = []
        for run in self.runs():
            records = self.run_records(run)
            summary = self.summarize(records)
            if tag is None:
                entries.append({"name": run, **summary})
                continue
            pooled = {k: v for k, v in summary.items() if not k.endswith("_ms") and k != "goodput"}
            groups = [
                {tag: value, **self.summarize([r for r in records if r.tags.get(tag) == value])}
                for value in dict.fromkeys(r.tags.get(tag) for r in records)
            ]
            entries.append({"name": run, **pooled, f"by_{tag}": groups})
        return entries

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kvtier_version": __version__,  # a later kvtier names the version that wrote a file it cannot read
            "workload": self.workload,
            "label": self.label,
            "partial": self.partial,
            "interrupted": self.interrupted,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "settings": self.settings,
            "probes": self.probes,
            "runs": self.run_entries(),
            "run_order": self.run_order,
            "cache": self.cache,
            "cache_totals": cache_totals(self.cache),
            "details": self.details,
            "requests": [r.to_json() for r in self.records],
        }

    def write(self, path: Path) -> None:
        """Indented, with one request a line: json's C encoder runs only without `indent`, and indenting thousands
        of records in Python cost more CPU per request than sending them at 64 in flight."""
        data = self.to_json()
        requests = data.pop("requests")
        head = json.dumps(data, indent=2, default=str)
        rows = ",\n    ".join(json.dumps(r, default=str) for r in requests)
        body = f'  "requests": [\n    {rows}\n  ]' if rows else '  "requests": []'
        path.write_text(f"{head[:-2]},\n{body}\n}}\n", encoding="utf-8")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchResult:
        return cls(
            workload=data["workload"],
            started_at=data["started_at"],
            duration_s=data["duration_s"],
            settings=data.get("settings", {}),
            run_order=data.get("run_order", []),
            records=[RequestRecord.from_json(r) for r in data.get("requests", [])],
            cache=data.get("cache", []),
            details=data.get("details", {}),
            probes=data.get("probes", []),
            label=data.get("label"),
            interrupted=data.get("interrupted"),
        )


def load_result(path: Path) -> BenchResult:
    """Read a result file; a missing, unreadable or foreign file is a UsageError (exit 2)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read result file {path}: {err}") from err
    except json.JSONDecodeError as err:
        raise UsageError(f"{path} is not JSON ({err.msg}); pass a result.json written by kvtier bench") from err
    if isinstance(data, dict) and data.get("format") != FORMAT and _newer(data.get("format")):
        raise UsageError(
            f'{path} is a newer kvtier bench result ("format": "{data["format"]}"; this kvtier {__version__} reads '
            f'"{FORMAT}"); read it with the kvtier version that wrote it{_writer(data)}, or upgrade kvtier'
        )
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f'{path} is not a kvtier bench result (no "format": "{FORMAT}")')
    problem = shape_problem(data)
    if problem:
        raise UsageError(
            f"{path}: malformed kvtier bench result: {problem}; pass a result.json written by kvtier bench"
        )
    return BenchResult.from_json(data)


def _newer(value: object) -> bool:
    """`kvtier-bench/N` with N above ours: a file from a later kvtier, not a foreign one."""
    prefix, _, ours = FORMAT.rpartition("/")
    if not isinstance(value, str) or not value.startswith(prefix + "/"):
        return False
    number = value.removeprefix(prefix + "/")
    return number.isdigit() and int(number) > int(ours)


def _writer(data: dict[str, Any]) -> str:
    version = data.get("kvtier_version")
    return f" ({version})" if isinstance(version, str) and version else ""


# What summaries, compare and the report read from a result file, by type: a hand-edited or foreign file must fail
# here with its field named, not deep in the arithmetic.
_NUMBER = "a number"
_OPT_NUMBER = "a number or null"
_TYPES: dict[str, tuple[type, ...]] = {
    "a string": (str,),
    "a string or null": (str, type(None)),
    "a number": (int, float),
    "a number or null": (int, float, type(None)),
    "an integer": (int,),
    "an integer or null": (int, type(None)),
    "true or false": (bool,),
    "an object": (dict,),
    "an object or null": (dict, type(None)),
    "a list": (list,),
}
_TOP: dict[str, tuple[str, bool]] = {  # key: (kind, required)
    "workload": ("a string", True),
    "started_at": ("a string", True),
    "duration_s": (_NUMBER, True),
    "label": ("a string or null", False),
    "partial": ("true or false", False),
    "interrupted": ("an object or null", False),
    "settings": ("an object", False),
    "run_order": ("a list", False),
    "requests": ("a list", False),
    "cache": ("a list", False),
    "details": ("an object", False),
    "probes": ("a list", False),
}
_RECORD: dict[str, tuple[str, bool]] = {
    "run": ("a string", True),
    "url": ("a string", True),
    "index": ("an integer", True),
    "tags": ("an object", True),
    "start_ms": (_NUMBER, True),
    "scheduled_ms": (_OPT_NUMBER, False),
    "ok": ("true or false", False),
    "answered": ("true or false", False),
    "status": ("an integer or null", False),
    "error_kind": ("a string or null", False),
    "error": ("a string or null", False),
    "ttft_ms": (_OPT_NUMBER, False),
    "e2e_ms": (_OPT_NUMBER, False),
    "itl_ms": ("a list", False),
    "tpot_ms": (_OPT_NUMBER, False),
    "text_chunks": ("an integer", False),
    "prompt_tokens": ("an integer or null", False),
    "completion_tokens": ("an integer or null", False),
    "cached_tokens": ("an integer or null", False),
    "usage_reported": ("true or false", False),
}
_TIER: dict[str, tuple[str, bool]] = {"hit_tokens": (_OPT_NUMBER, False), "query_tokens": (_OPT_NUMBER, False)}
_SWEEP_ROW: dict[str, tuple[str, bool]] = {
    "length": ("an integer", True),
    "cold_ttft_ms": (_OPT_NUMBER, True),
    "reused_ttft_ms": (_OPT_NUMBER, True),
    "speedup": (_OPT_NUMBER, True),
}


def _kind_problems(where: str, value: Any, kind: str) -> Iterator[str]:
    allowed = _TYPES[kind]
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        yield f"{where} is {json.dumps(value)[:40]}, not {kind}"


def _timing_problems(where: str, value: Any) -> Iterator[str]:
    """A negative duration (a hand-edited file): compare would print it as a negative ratio ("-80.36x")."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
        yield f"{where} is {value}, and a timing cannot be negative"


def _object_problems(where: str, obj: Any, fields: dict[str, tuple[str, bool]]) -> Iterator[str]:
    if not isinstance(obj, dict):
        yield f"{where} is not an object"
        return
    for key, (kind, required) in fields.items():
        if key in obj:
            name = f"{where}.{key}" if where else key
            yield from _kind_problems(name, obj[key], kind)
            if key.endswith(("_ms", "_s")):  # every timing field is named by its unit
                yield from _timing_problems(name, obj[key])
        elif required:
            yield f"{where or 'the file'} has no {key!r}"


def _settings_problems(settings: Any) -> Iterator[str]:
    """The settings the summaries are computed with: percentiles and SLO bounds."""
    if not isinstance(settings, dict):
        return
    percentiles = settings.get("percentiles", [])
    yield from _kind_problems("settings.percentiles", percentiles, "a list")
    for i, q in enumerate(percentiles if isinstance(percentiles, list) else []):
        yield from _kind_problems(f"settings.percentiles[{i}]", q, _NUMBER)
        if isinstance(q, int | float) and not isinstance(q, bool) and not 0 <= q <= 100:
            yield f"settings.percentiles[{i}] is {q}, not a percentile from 0 to 100"
    slo = settings.get("slo_ms")
    yield from _kind_problems("settings.slo_ms", slo, "an object or null")
    for key, bound in (slo if isinstance(slo, dict) else {}).items():
        if key not in ("ttft", "tpot", "e2e"):
            yield f"settings.slo_ms has {key!r}, not one of ttft, tpot, e2e"
        yield from _kind_problems(f"settings.slo_ms.{key}", bound, _NUMBER)


def _problems(data: dict[str, Any]) -> Iterator[str]:
    yield from _object_problems("", data, _TOP)
    yield from _settings_problems(data.get("settings", {}))
    for i, name in enumerate(data.get("run_order", [])):
        yield from _kind_problems(f"run_order[{i}]", name, "a string")
    for i, record in enumerate(data.get("requests", [])):
        where = f"requests[{i}]"
        yield from _object_problems(where, record, _RECORD)
        for j, gap in enumerate(record.get("itl_ms", [])):
            yield from _kind_problems(f"{where}.itl_ms[{j}]", gap, _NUMBER)
            yield from _timing_problems(f"{where}.itl_ms[{j}]", gap)
    for i, report in enumerate(data.get("cache", [])):
        where = f"cache[{i}]"
        yield from _object_problems(where, report, {"tiers": ("an object", False), "l2_io": ("an object", False)})
        for key, tier in report.get("tiers", {}).items():
            yield from _object_problems(f"{where}.tiers.{key}", tier, _TIER)
        for key, value in report.get("l2_io", {}).items():
            yield from _kind_problems(f"{where}.l2_io.{key}", value, _NUMBER)
    for i, probe in enumerate(data.get("probes", [])):
        yield from _kind_problems(f"probes[{i}]", probe, "an object")
    sweep = data.get("details", {}).get("sweep", [])
    yield from _kind_problems("details.sweep", sweep, "a list")
    for i, row in enumerate(sweep):
        yield from _object_problems(f"details.sweep[{i}]", row, _SWEEP_ROW)


def shape_problem(data: dict[str, Any]) -> str | None:
    """The first field of a result file whose type is wrong, described; None when the file has the right shape.

    Problems come out in reading order and reading stops at the first, so a container is always checked before
    its items are looked into."""
    return next(_problems(data), None)
