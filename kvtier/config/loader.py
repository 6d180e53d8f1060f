"""The one loader: YAML files -> validated, typed configuration of one environment, or one ConfigError.

Every problem is reported as `<file>: <field path>: <problem>; <what is allowed>`, all at once, before any
construct is built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from kvtier.config.environment import Environment
from kvtier.config.errors import problems_from
from kvtier.config.yamlio import read_yaml
from kvtier.errors import ConfigError, Problem

DEFAULT_ENV = "dev"
DEFAULT_CONFIG_DIR = "config"
CONFIG_DIR_VARIABLE = "KVTIER_CONFIG_DIR"


@dataclass(frozen=True)
class Config:
    """Everything one environment deploys, validated."""

    env: Environment
    config_dir: Path
    warnings: tuple[Problem, ...] = field(default=())


def resolve_config_dir(flag: str | None) -> Path:
    """`--config-dir` / `-c config_dir=` first, then $KVTIER_CONFIG_DIR, then ./config."""
    return Path(flag or os.environ.get(CONFIG_DIR_VARIABLE) or DEFAULT_CONFIG_DIR)


def available_envs(config_dir: Path) -> list[str]:
    return sorted(p.stem for p in (config_dir / "environments").glob("*.yaml"))


def _shown(path: Path, config_dir: Path) -> str:
    return str(config_dir / path.relative_to(config_dir))


def load_config(config_dir: Path, env_name: str = DEFAULT_ENV) -> Config:
    env_file = config_dir / "environments" / f"{env_name}.yaml"
    shown = _shown(env_file, config_dir)
    if not env_file.is_file():
        known = available_envs(config_dir)
        allowed = f"environments here: {', '.join(known)}" if known else f"create {shown} (see README)"
        raise ConfigError([Problem(shown, "", f"environment '{env_name}' has no file", allowed)])
    data = read_yaml(env_file, shown)
    try:
        env = Environment.model_validate(data)
    except ValidationError as err:
        raise ConfigError(problems_from(err, shown, Environment)) from None
    if env.name != env_name:
        raise ConfigError([Problem(shown, "name", f"'{env.name}' differs from the file name", f"use name: {env_name}")])
    return Config(env=env, config_dir=config_dir)
