"""Cross-checks on a whole environment (env file + its LOB files), run by the loader before any construct is built.

Each check returns problems: errors stop `cdk synth` and `kvtier validate` (exit 2); warnings are printed (exit 0).
"""

from __future__ import annotations

from collections.abc import Mapping

from kvtier.config.environment import Environment
from kvtier.config.lob import LineOfBusiness
from kvtier.errors import Problem


def cross_check(
    env: Environment, env_file: str, lobs: Mapping[str, LineOfBusiness], lob_files: Mapping[str, str]
) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) for the environment as a whole."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    return errors, warnings
