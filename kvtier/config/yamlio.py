"""Reading YAML config files, safely: duplicate keys are errors (PyYAML would keep the last one silently), files are
capped in size, and aliases may not expand a document beyond a fixed number of values ("billion laughs": a few
hundred bytes of nested aliases expand to billions of values that validation and messages would walk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kvtier.errors import ConfigError, Problem

# A kvtier config file is a few KiB; 1 MiB leaves room for very large LOB files and bounds the time to parse one.
MAX_FILE_BYTES = 1024 * 1024
# Values a document may hold once every alias is expanded: far above any real config (the shipped prod
# environment holds a few hundred), far below what takes noticeable time or memory.
MAX_EXPANDED_VALUES = 100_000


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


def expanded_size(node: yaml.Node, limit: int = MAX_EXPANDED_VALUES) -> int:
    """Values in `node` with every alias expanded, counted up to just past `limit` (aliases share node objects, so
    sizes are memoised per node and the count never walks the expansion itself)."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        known = sizes.get(id(n))
        if known is not None:
            return known
        sizes[id(n)] = limit + 1  # a node inside itself (recursive alias) counts as too large
        if isinstance(n, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in n.value)
        elif isinstance(n, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in n.value)
        else:
            total = 1
        sizes[id(n)] = min(total, limit + 1)
        return sizes[id(n)]

    return size(node)


def read_yaml(path: Path, shown_as: str) -> dict[str, Any]:
    """The mapping in `path`; any problem becomes a ConfigError naming `shown_as`."""
    try:
        length = path.stat().st_size
    except OSError as err:
        raise ConfigError([Problem(shown_as, "", f"cannot be read ({err.strerror})", "check the path")]) from None
    if length > MAX_FILE_BYTES:
        raise ConfigError(
            [
                Problem(
                    shown_as,
                    "",
                    f"is {length / 1024**2:.1f} MiB; config files are at most {MAX_FILE_BYTES // 1024**2} MiB",
                    "check that this is the right file (kvtier config files are a few KiB)",
                )
            ]
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError([Problem(shown_as, "", f"cannot be read ({err.strerror})", "check the path")]) from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            [Problem(shown_as, f"byte {err.start}", "is not UTF-8 text", "save the file as UTF-8")]
        ) from None
    try:
        data = _load(text, shown_as)
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


def _load(text: str, shown_as: str) -> Any:
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if expanded_size(node) > MAX_EXPANDED_VALUES:
            raise ConfigError(
                [
                    Problem(
                        shown_as,
                        "",
                        f"expands to more than {MAX_EXPANDED_VALUES:,} values through YAML aliases",
                        "write the values out, or use fewer nested aliases (&anchor / *alias)",
                    )
                ]
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()
