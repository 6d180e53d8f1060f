"""The result file of one benchmark: settings, every request, per-run summaries, cache hits per tier."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvtier.bench.metrics import cache_totals
from kvtier.bench.records import RequestRecord
from kvtier.bench.stats import summarize
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

    def runs(self) -> list[str]:
        """Run names that have requests, in the workload's order (then any others)."""
        present = list(dict.fromkeys(r.run for r in self.records))
        return [r for r in self.run_order if r in present] + [r for r in present if r not in self.run_order]

    def run_records(self, run: str) -> list[RequestRecord]:
        return [r for r in self.records if r.run == run]

    def summaries(self) -> dict[str, dict[str, Any]]:
        return {run: summarize(self.run_records(run)) for run in self.runs()}

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "workload": self.workload,
            "label": self.label,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "settings": self.settings,
            "probes": self.probes,
            "runs": [{"name": name, **summary} for name, summary in self.summaries().items()],
            "run_order": self.run_order,
            "cache": self.cache,
            "cache_totals": cache_totals(self.cache),
            "details": self.details,
            "requests": [r.to_json() for r in self.records],
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n", encoding="utf-8")

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
        )


def load_result(path: Path) -> BenchResult:
    """Read a result file; a missing, unreadable or foreign file is a UsageError (exit 2)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read result file {path}: {err}") from err
    except json.JSONDecodeError as err:
        raise UsageError(f"{path} is not JSON ({err.msg}); pass a result.json written by kvtier bench") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f'{path} is not a kvtier bench result (no "format": "{FORMAT}")')
    try:
        return BenchResult.from_json(data)
    except (KeyError, TypeError) as err:
        raise UsageError(f"{path}: malformed kvtier bench result ({err})") from err
