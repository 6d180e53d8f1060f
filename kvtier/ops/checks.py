"""What `kvtier preflight` and `kvtier status` share: one AWS-side check with its verdict, and what a report of them
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


class ChecksReport:
    """A report whose `checks` decide it: ok when every verdict is, exit 1 otherwise (mixed into the dataclasses)."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.verdict == "ok" for c in self.checks)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.ok else ExitCode.PROBLEMS


def as_json(checks: Iterable[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]
