"""Reading YAML config files: duplicate keys are errors (PyYAML would keep the last one silently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvtier.errors import ConfigError, Problem


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain value, not a {type(key).__name__}", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' appears twice (first on line {seen[key] + 1})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: Path, shown_as: str) -> dict[str, Any]:
    """The mapping in `path`; any problem becomes a ConfigError naming `shown_as`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError([Problem(shown_as, "", f"cannot be read ({err.strerror})", "check the path")]) from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            [Problem(shown_as, f"byte {err.start}", "is not UTF-8 text", "save the file as UTF-8")]
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        what = getattr(err, "problem", None) or str(err)
        raise ConfigError([Problem(shown_as, where, f"is not valid YAML ({what})", "fix the YAML syntax")]) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [Problem(shown_as, "", f"holds a {type(data).__name__}, not a mapping", "write key: value pairs")]
        )
    return data
