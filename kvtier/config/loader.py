"""The one loader: YAML files -> validated, typed configuration of one environment, or one ConfigError.

Parsing only: each file against its model. The cross-file rules run above this layer (`kvtier.rules.load_checked`,
the entry the app and the CLI use). Every problem is reported as `<file>: <field path>: <problem>; <what is
allowed>`, all at once, before any construct is built.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kvtier.config.environment import Environment
from kvtier.config.errors import cut_quoted, problems_from
from kvtier.config.lob import LineOfBusiness
from kvtier.config.yamlio import file_kind, read_yaml
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

    def model_buckets(self) -> tuple[str, ...]:
        """The S3 buckets the LOB files load model weights from (models and LoRA adapters), each once, sorted."""
        return tuple(sorted({s.bucket for lob in self.lobs for e in lob.endpoints for _, s in e.s3_sources()}))


def resolve_config_dir(flag: str | None) -> Path:
    """`--config-dir` / `-c config_dir=` first, then $KVTIER_CONFIG_DIR, then ./config."""
    return Path(flag or os.environ.get(CONFIG_DIR_VARIABLE) or DEFAULT_CONFIG_DIR)


def available_envs(config_dir: Path) -> list[str]:
    """Environment names under `config_dir` (none when the folder cannot be listed: check_config_dir says why)."""
    folder = config_dir / "environments"
    try:
        return sorted(
            entry.name[: -len(".yaml")]
            for entry in os.scandir(folder)
            if entry.name.endswith(".yaml") and _NAME.fullmatch(entry.name[: -len(".yaml")]) and _is_file(entry)
        )
    except OSError:
        return []


def _is_file(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()
    except OSError:
        return False


def _unreadable(path: Path, err: OSError) -> Problem:
    """`path` cannot be looked at: one line naming the file or the folder in the way, and the fix."""
    if isinstance(err.filename, str):
        path = Path(err.filename)  # the path the lookup failed on (a folder's entry, say)
    if err.errno not in (errno.EACCES, errno.EPERM):
        return Problem(str(path), "", f"cannot be read ({err.strerror})", "check the path")
    folder = _blocked_at(path)
    if folder == path:
        return Problem(str(path), "", f"cannot be read ({err.strerror})", f"give your user read permission on {path}")
    return Problem(
        str(folder),
        "",
        f"folder cannot be searched ({err.strerror}), so {path} cannot be read",
        f"give your user read and search permission on the folder (chmod u+rx {folder})",
    )


def _blocked_at(path: Path) -> Path:
    """The folder whose permissions stop a lookup of `path`: the parent of the first part of it that cannot be
    looked up (`path` itself when every part can)."""
    for part in [*reversed(path.parents), path]:
        try:
            part.stat()
        except PermissionError:
            return part.parent
        except OSError:
            break
    return path


# What an environment or LOB name may be (design "Names and limits": RFC 1123 labels); anything else, such as a path,
# is refused before it is joined to a folder, so `-e ../lobs/retail` cannot load a LOB file as an environment.
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _file_problem(path: Path, shown: str, name: str, what: str) -> Problem | None:
    """Why `path` cannot be read as the file of `name`, or None when it looks like a regular file (read_yaml checks
    the open file again)."""
    try:
        return _link_or_kind_problem(path, shown, name, what)
    except OSError as err:  # e.g. a folder on the way that the user may not search
        return _unreadable(path, err)


def _link_or_kind_problem(path: Path, shown: str, name: str, what: str) -> Problem | None:
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:
            return Problem(shown, "", "is a symbolic link that loops back on itself", "point it at a real file")
        except OSError:
            return Problem(
                shown, "", f"is a symbolic link to {path.readlink()}, which does not exist", "fix or remove the link"
            )
    if path.is_dir():
        return Problem(shown, "", "is a directory, not a file", f"replace it with the {what} file")
    if path.exists() and not path.is_file():
        kind = file_kind(path.stat().st_mode)
        return Problem(shown, "", f"is {kind}, not a regular file", f"replace it with the {what} file")
    if not path.is_file():
        return Problem(shown, "", f"{what} '{name}' has no file", f"create {shown} (see the examples in config/)")
    return None


def check_config_dir(config_dir: Path) -> None:
    """The config folder exists and holds environments/: else one error naming the folder."""
    try:
        _check_config_dir(config_dir)
    except OSError as err:
        raise ConfigError([_unreadable(config_dir, err)]) from None


def _check_config_dir(config_dir: Path) -> None:
    shown = str(config_dir)
    if config_dir.exists() and not config_dir.is_dir():
        kind = "a file" if config_dir.is_file() else file_kind(config_dir.stat().st_mode)
        raise ConfigError(
            [
                Problem(
                    shown, "", f"is {kind}, not a config folder", "pass the folder that holds environments/ and lobs/"
                )
            ]
        )
    if not config_dir.is_dir():
        raise ConfigError(
            [
                Problem(
                    shown, "", "config folder does not exist", "pass --config-dir with a folder holding environments/"
                )
            ]
        )
    environments = config_dir / "environments"
    if environments.exists() and not environments.is_dir():
        raise ConfigError(
            [
                Problem(
                    str(environments),
                    "",
                    "is a file, not a folder",
                    "move it away and create the folder environments/ with one <env>.yaml per environment",
                )
            ]
        )
    if not environments.is_dir():
        raise ConfigError(
            [
                Problem(
                    str(environments),
                    "",
                    "folder does not exist",
                    "create it with one <env>.yaml per environment (see config/environments/ in the kvtier repo)",
                )
            ]
        )


def _parse(model: type[M], path: Path, shown: str, name: str, what: str) -> tuple[M | None, list[Problem]]:
    """Validate one file; the file's `name` must equal its file name."""
    problem = _file_problem(path, shown, name, what)
    if problem is not None:
        return None, [problem]
    try:
        data: dict[str, Any] = read_yaml(path, shown, what)
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


def _raw_lob_names(path: Path, shown: str) -> list[str]:
    """The `lobs` list of an environment file that failed validation, so the LOB files are checked too and every
    problem of every file is reported at once (names that are not plain names are skipped)."""
    try:
        data = read_yaml(path, shown, "environment")
    except ConfigError:
        return []
    names = data.get("lobs")
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and _NAME.fullmatch(n)]


def parse_config(config_dir: Path, env_name: str = DEFAULT_ENV) -> Config:
    """Every file of the environment, each validated against its model (no cross-file rules)."""
    check_config_dir(config_dir)
    known = available_envs(config_dir)
    if not _NAME.fullmatch(env_name):
        raise ConfigError(
            [
                Problem(
                    "-e/--env",
                    "",
                    f"'{cut_quoted(env_name)}' is not an environment name (a file name under "
                    f"{config_dir / 'environments'}, without .yaml)",
                    f"use one of {', '.join(known)}" if known else "use a lowercase name like dev",
                )
            ]
        )
    env_file = config_dir / "environments" / f"{env_name}.yaml"
    shown_env = str(env_file)
    try:
        missing = not env_file.exists() and not env_file.is_symlink()
    except OSError as err:
        raise ConfigError([_unreadable(env_file, err)]) from None
    if missing:
        allowed = (
            f"environments here: {', '.join(known)}" if known else f"create {shown_env} (see docs/configuration.md)"
        )
        raise ConfigError([Problem(shown_env, "", f"environment '{env_name}' has no file", allowed)])
    env, problems = _parse(Environment, env_file, shown_env, env_name, "environment")
    if env is not None:
        lob_names = list(env.lobs)
    elif _file_problem(env_file, shown_env, env_name, "environment") is None:
        lob_names = _raw_lob_names(env_file, shown_env)
    else:  # not a file that can be read: there is no lobs list to look at
        lob_names = []
    lobs: dict[str, LineOfBusiness] = {}
    files = {"env": shown_env}
    for index, lob_name in enumerate(lob_names):
        path = config_dir / "lobs" / f"{lob_name}.yaml"
        files[lob_name] = str(path)
        lob, lob_problems = _parse(LineOfBusiness, path, str(path), lob_name, "line of business")
        if lob is None and lob_problems and "has no file" in lob_problems[0].problem:
            lob_problems = [Problem(shown_env, f"lobs[{index}]", lob_problems[0].problem, lob_problems[0].allowed)]
        problems.extend(lob_problems)
        if lob is not None:
            lobs[lob_name] = lob
    if problems or env is None:
        raise ConfigError(list(dict.fromkeys(problems)))  # one unreadable folder would repeat for each LOB
    return Config(env=env, config_dir=config_dir, lobs=tuple(lobs[name] for name in env.lobs), files=files)
