"""The one loader: YAML files -> validated, typed configuration of one environment, or one ConfigError.

Parsing only: each file against its model. The cross-file rules run above this layer (`kvtier.rules.load_checked`,
the entry the app and the CLI use). Every problem is reported as `<file>: <field path>: <problem>; <what is
allowed>`, all at once, before any construct is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kvtier.config.environment import Environment
from kvtier.config.errors import problems_from
from kvtier.config.lob import LineOfBusiness
from kvtier.config.yamlio import read_yaml
from kvtier.errors import ConfigError, Problem

DEFAULT_ENV = "dev"
DEFAULT_CONFIG_DIR = "config"
CONFIG_DIR_VARIABLE = "KVTIER_CONFIG_DIR"
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Config:
    """Everything one environment deploys, validated."""

    env: Environment
    config_dir: Path
    lobs: tuple[LineOfBusiness, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  # "env" and each LOB name -> file as shown to users
    warnings: tuple[Problem, ...] = ()

    def lob(self, name: str) -> LineOfBusiness:
        return next(lob for lob in self.lobs if lob.name == name)


def resolve_config_dir(flag: str | None) -> Path:
    """`--config-dir` / `-c config_dir=` first, then $KVTIER_CONFIG_DIR, then ./config."""
    return Path(flag or os.environ.get(CONFIG_DIR_VARIABLE) or DEFAULT_CONFIG_DIR)


def available_envs(config_dir: Path) -> list[str]:
    return sorted(p.stem for p in (config_dir / "environments").glob("*.yaml") if p.is_file())


def _parse(model: type[M], path: Path, shown: str, name: str, what: str) -> tuple[M | None, list[Problem]]:
    """Validate one file; the file's `name` must equal its file name."""
    if path.is_dir():
        return None, [Problem(shown, "", "is a directory, not a file", f"replace it with the {what} file")]
    if not path.is_file():
        return None, [
            Problem(shown, "", f"{what} '{name}' has no file", f"create {shown} (see the examples in config/)")
        ]
    try:
        data: dict[str, Any] = read_yaml(path, shown)
        parsed = model.model_validate(data)
    except ConfigError as err:
        return None, err.problems
    except ValidationError as err:
        return None, problems_from(err, shown, model)
    if getattr(parsed, "name", name) != name:
        return None, [
            Problem(shown, "name", f"'{getattr(parsed, 'name', '')}' differs from the file name", f"use name: {name}")
        ]
    return parsed, []


def parse_config(config_dir: Path, env_name: str = DEFAULT_ENV) -> Config:
    """Every file of the environment, each validated against its model (no cross-file rules)."""
    env_file = config_dir / "environments" / f"{env_name}.yaml"
    shown_env = str(env_file)
    if env_file.is_dir():
        raise ConfigError(
            [Problem(shown_env, "", "is a directory, not a file", "replace it with the environment file")]
        )
    if not env_file.is_file():
        known = available_envs(config_dir)
        allowed = f"environments here: {', '.join(known)}" if known else f"create {shown_env} (see README)"
        raise ConfigError([Problem(shown_env, "", f"environment '{env_name}' has no file", allowed)])
    env, problems = _parse(Environment, env_file, shown_env, env_name, "environment")
    if env is None:
        raise ConfigError(problems)
    lobs: dict[str, LineOfBusiness] = {}
    files = {"env": shown_env}
    for index, lob_name in enumerate(env.lobs):
        path = config_dir / "lobs" / f"{lob_name}.yaml"
        files[lob_name] = str(path)
        lob, lob_problems = _parse(LineOfBusiness, path, str(path), lob_name, "line of business")
        if lob is None and lob_problems and "has no file" in lob_problems[0].problem:
            lob_problems = [Problem(shown_env, f"lobs[{index}]", lob_problems[0].problem, lob_problems[0].allowed)]
        problems.extend(lob_problems)
        if lob is not None:
            lobs[lob_name] = lob
    if problems:
        raise ConfigError(problems)
    return Config(env=env, config_dir=config_dir, lobs=tuple(lobs[name] for name in env.lobs), files=files)
