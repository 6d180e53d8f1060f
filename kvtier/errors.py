"""Exit codes and the errors that map onto them (fixed by the design contract)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    PROBLEMS = 1  # the command ran and found problems
    USAGE = 2  # invalid input or usage: bad config, bad flags
    UNAVAILABLE = 3  # cannot check at all: no credentials, no cluster, no URL answers


@dataclass(frozen=True)
class Problem:
    """One finding about the configuration: `<file>: <field>: <problem>; <allowed>`."""

    file: str
    field: str
    problem: str
    allowed: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.problem}; {self.allowed}"


class KvtierError(Exception):
    """An expected failure: printed as its message, never as a traceback."""

    exit_code: ExitCode = ExitCode.USAGE


class ConfigError(KvtierError):
    """The configuration is invalid; carries every problem found, not only the first."""

    exit_code = ExitCode.USAGE

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class UsageError(KvtierError):
    exit_code = ExitCode.USAGE


class UnavailableError(KvtierError):
    """Nothing could be checked (no credentials, no such cluster, no URL answered)."""

    exit_code = ExitCode.UNAVAILABLE


SHOWN_NAMES = 5  # items an error lists before "and N more": one readable line however many there are


def name_list(names: Sequence[str], shown: int = SHOWN_NAMES) -> str:
    """`a, b, c`, or past `shown` items the first ones and `and 490 more`."""
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f" and {len(names) - shown} more"
