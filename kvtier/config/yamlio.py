"""Reading YAML config files, safely: only regular files, read with a hard byte cap (never blocking on a pipe or
reading a device without end); duplicate keys are errors (PyYAML would keep the last one silently); aliases and merge
keys (`<<: *base`) work, but may not expand a document beyond a fixed number of values ("billion laughs": a few hundred
bytes of nested aliases expand to billions of values that validation and messages would walk)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from kvtier.errors import ConfigError, Problem

# A kvtier config file is a few KiB; 1 MiB leaves room for very large LOB files and bounds the time to parse one.
MAX_FILE_BYTES = 1024 * 1024
# Values a document may hold once every alias is expanded: far above any real config (the shipped prod
# environment holds a few hundred), far below what takes noticeable time or memory.
MAX_EXPANDED_VALUES = 100_000


MERGE_TAG = "tag:yaml.org,2002:merge"


def check_keys(loader: yaml.SafeLoader, root: yaml.Node) -> None:
    """Every mapping's own keys are plain values (not lists or mappings) and unique. Checked on the composed node
    graph, before construction expands YAML merge keys (`<<: *base`): a mapping's own keys win over merged ones (YAML
    1.1 merge), so a merged key repeated below is an override, not a duplicate. Each node is visited once."""
    visited: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    key: Any = "<<"
                else:
                    key = loader.construct_object(key_node) if isinstance(key_node, yaml.ScalarNode) else key_node
                    if not isinstance(key, str | int | float | bool) and key is not None:
                        kind = {yaml.SequenceNode: "list", yaml.MappingNode: "mapping"}.get(
                            type(key), type(key).__name__
                        )
                        raise yaml.constructor.ConstructorError(
                            None, None, f"a key must be a plain value, not a {kind}", key_node.start_mark
                        )
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key '{key}' appears twice (first on line {seen[key] + 1})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line
                stack.append(value_node)


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


def _problem(shown_as: str, problem: str, allowed: str, where: str = "") -> ConfigError:
    return ConfigError([Problem(shown_as, where, problem, allowed)])


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words (from its st_mode)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a special file"


def read_capped(path: Path, shown_as: str, what: str = "config") -> bytes:
    """The bytes of the regular file `path`, at most MAX_FILE_BYTES of them, or a ConfigError naming `shown_as`.

    The file is opened without blocking and checked on the open descriptor, so a FIFO (which would wait forever for a
    writer) or a device such as /dev/zero (endless, and st_size 0) is refused, even behind a symbolic link or when it
    replaces the file between a check and the read; the read itself stops one byte past the cap whatever st_size says.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise _problem(shown_as, f"cannot be read ({err.strerror})", _fix_for(err)) from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _problem(shown_as, f"is {file_kind(mode)}, not a regular file", f"replace it with the {what} file")
        try:
            data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as err:
            raise _problem(shown_as, f"cannot be read ({err.strerror})", _fix_for(err)) from None
        if len(data) > MAX_FILE_BYTES:
            size = max(os.fstat(fd).st_size, MAX_FILE_BYTES + 1)
            raise _problem(
                shown_as,
                f"is {size / 1024**2:.1f} MiB; config files are at most {MAX_FILE_BYTES // 1024**2} MiB",
                "check that this is the right file (kvtier config files are a few KiB)",
            )
    return data


def _fix_for(err: OSError) -> str:
    if err.errno in (errno.EACCES, errno.EPERM):
        return "give your user read permission on it (and search permission on its folders)"
    return "check the path"


def read_yaml(path: Path, shown_as: str, what: str = "config") -> dict[str, Any]:
    """The mapping in `path`; any problem becomes a ConfigError naming `shown_as` (`what`: the kind of file, for the
    fixes the messages suggest)."""
    raw = read_capped(path, shown_as, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _problem(shown_as, "is not UTF-8 text", "save the file as UTF-8", f"byte {err.start}") from None
    try:
        data = _load(text, shown_as)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        what_went_wrong = getattr(err, "problem", None) or str(err)
        problem, fix = _yaml_words(what_went_wrong)
        raise _problem(shown_as, problem, fix, where) from None
    if data is None:
        raise _problem(shown_as, "is empty (or holds only comments)", f"write the {what} file as key: value pairs")
    if not isinstance(data, dict):
        raise _problem(
            shown_as,
            f"holds {_KINDS.get(type(data), 'a single value')}, not a mapping of key: value pairs",
            f"write the {what} file as key: value pairs",
        )
    return data


_KINDS: dict[type, str] = {
    list: "a list",
    str: "a single string",
    int: "a single number",
    float: "a single number",
    bool: "a single true/false",
}


def _yaml_words(problem: str) -> tuple[str, str]:
    """PyYAML's problem as a user reads it, with the fix."""
    if "'\\t'" in problem or "tab character" in problem:  # PyYAML: "found character '\t' that cannot start any token"
        return (
            "holds a tab character where YAML expects spaces (YAML indents and separates with spaces only)",
            "replace the tab with spaces",
        )
    return f"is not valid YAML ({problem})", "fix the YAML syntax"


def _load(text: str, shown_as: str) -> Any:
    loader = yaml.SafeLoader(text)
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
        check_keys(loader, node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
