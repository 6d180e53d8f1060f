"""What `kvtier preflight` and `kvtier status` share: one AWS-side check with its verdict, and what a list of them
means for the exit code and the JSON output."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from kvtier.errors import ExitCode

# "problem" is preflight's word for a blocker, "degraded" status's for a running cluster that is not healthy.
Verdict = Literal["ok", "problem", "degraded", "unknown"]


@dataclass(frozen=True)
class Check:
    area: (
        str  # preflight: bootstrap | account | quota | zone | add-on | cluster; status: cluster | instance group | ...
    )
    name: str
    value: str
    verdict: Verdict
    detail: str = ""


def all_ok(checks: Iterable[Check]) -> bool:
    return all(c.verdict == "ok" for c in checks)


def verdict_exit_code(checks: Iterable[Check]) -> ExitCode:
    return ExitCode.OK if all_ok(checks) else ExitCode.PROBLEMS


def as_json(checks: Iterable[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]
