"""Turn pydantic validation errors into `<file>: <field path>: <problem>; <what is allowed>` problems."""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, Union

from pydantic import BaseModel, ValidationError

from kvtier.config.base import FieldError
from kvtier.errors import Problem

_TYPE_WORDS = {
    "int_type": "a whole number",
    "float_type": "a number",
    "string_type": "a string (quote it)",
    "bool_type": "true or false",
    "tuple_type": "a list",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "none_required": "null",
    "int_from_float": "a whole number",
}
_RANGE = {
    "greater_than_equal": ">=",
    "greater_than": ">",
    "less_than_equal": "<=",
    "less_than": "<",
}


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation may hold, looking through Annotated, Optional, unions and containers."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType, tuple, list, dict):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not Ellipsis:
                out.extend(_unwrap(arg))
        return out
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _tagged(models: list[type[BaseModel]], part: str) -> list[type[BaseModel]]:
    """The models of a union that `part` names: by a discriminator value (a Literal field, e.g. `source:
    huggingface`) or by class name (pydantic's branch name for a plain union)."""
    out = []
    for model in models:
        if part in (model.__name__, model.__name__.lower()) or any(
            typing.get_origin(f.annotation) is Literal and part in typing.get_args(f.annotation)
            for f in model.model_fields.values()
        ):
            out.append(model)
    return out


def _is_path_part(part: str | int) -> bool:
    if isinstance(part, int):
        return True
    # pydantic adds union branch names ("str", "function-after[...]") to locations; they are not fields.
    return not ("[" in part or "(" in part or part in {"str", "int", "float", "bool", "none", "tuple", "list"})


def format_path(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _keyed(annotation: Any) -> bool:
    """Whether a field holds a mapping of user-chosen keys (e.g. `models: {<id>: {...}}`), looking through Annotated
    and Optional."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _keyed(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_keyed(arg) for arg in typing.get_args(annotation))
    return origin is dict


def walk(loc: Sequence[str | int], root: type[BaseModel]) -> tuple[list[str | int], list[type[BaseModel]]]:
    """The location as the YAML spells it (without pydantic's branch names and union tags), and the models it leads
    to (one when the location names a model unambiguously, none below a plain value or an unknown key)."""
    out: list[str | int] = []
    current: list[type[BaseModel]] = [root]
    key_next = False  # the previous part was a mapping field: this part is one of its keys
    for part in loc:
        if not _is_path_part(part):
            continue
        if isinstance(part, int) or not current or key_next:
            out.append(part)
            key_next = False
            continue
        # A union's tag first: pydantic puts it before the fields, and it may equal a field's name (`signal`).
        tagged = _tagged(current, part) if len(current) > 1 else []
        fields = [] if tagged else [m.model_fields[part] for m in current if part in m.model_fields]
        if fields:
            out.append(part)
            current = [model for f in fields for model in _unwrap(f.annotation)]
            key_next = any(_keyed(f.annotation) for f in fields)
        elif tagged:  # the tag of a union of models (e.g. `huggingface`): not a key the user wrote, but it says which
            current = tagged
        else:  # a key no model here has
            out.append(part)
            current = []
    return out, current


# Values quoted in messages are cut to this many characters: a message stays one readable line even when the value
# is a whole mapping or a huge string.
MAX_SHOWN = 80


_QUOTED = re.compile("'([^']{" + str(MAX_SHOWN + 1) + ",})'")


def _display(value: Any) -> str:
    if value is None:
        return "null"
    shown = repr(value)
    return shown if len(shown) <= MAX_SHOWN else shown[: MAX_SHOWN - 3] + "..."


def cut_quoted(text: str) -> str:
    """`text` with every quoted value longer than MAX_SHOWN characters cut (validators quote what the user wrote)."""
    return _QUOTED.sub(lambda m: f"'{m.group(1)[: MAX_SHOWN - 3]}...'", text)


def _describe(
    error: dict[str, Any], holder: type[BaseModel] | None, loc: list[str | int]
) -> tuple[str, str, list[str | int]]:
    """(problem, fix, location) of one pydantic error; `holder`: the model whose mapping holds the value, if known."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    exc = ctx.get("error")
    if isinstance(exc, FieldError):
        extra: list[str | int] = []
        for piece in exc.at.replace("]", "").replace("[", ".").split("."):
            if piece:
                extra.append(int(piece) if piece.isdigit() else piece)
        return exc.problem, exc.allowed, loc + extra
    if kind in ("value_error", "assertion_error"):
        message = str(exc) if exc is not None else error["msg"]
        problem, _, allowed = message.partition("; ")
        return problem, allowed or "see the example files under config/", loc
    if kind == "extra_forbidden":
        if holder is None:
            return f"unknown key '{loc[-1]}'", "see the example files under config/", loc
        keys = list(holder.model_fields)
        close = difflib.get_close_matches(str(loc[-1]), keys, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown key '{loc[-1]}'", f"{hint}known keys here: {', '.join(keys)}", loc
    if kind == "missing":
        return "is required but missing", "add it (the example files under config/ show every key)", loc
    if kind in ("literal_error", "enum"):
        return f"{_display(value)} is not allowed", f"use one of {ctx.get('expected', '')}", loc
    if kind in _RANGE:
        bound = next(v for k, v in ctx.items() if k in ("ge", "gt", "le", "lt"))
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)  # a float field's bound of 10000 is written as the user would: 10000, not 10000.0
        return f"{_display(value)} is out of range", f"use a value {_RANGE[kind]} {bound}", loc
    if kind == "too_short":
        return f"{ctx.get('actual_length')} item(s) given", f"give at least {ctx.get('min_length')}", loc
    if kind == "too_long":
        return f"{ctx.get('actual_length')} items given", f"give at most {ctx.get('max_length')}", loc
    if kind == "union_tag_invalid":  # the kind key is there, with a value no kind has: name that key and value
        expected = ctx.get("expected_tags") or ctx.get("expected", "")
        key = str(ctx.get("discriminator", "")).strip(chr(39))
        tag = ctx.get("tag", value.get(key) if isinstance(value, dict) else "")
        return f"{_display(tag)} is not a kind kvtier knows", f"use one of {expected}", [*loc, key]
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        expected = ctx.get("expected_tags") or ctx.get("expected", "")
        return (
            f"{_display(value)} does not say which kind it is",
            f"set `{ctx.get('discriminator', '').strip(chr(39))}` to one of {expected}",
            loc,
        )
    if kind == "finite_number":
        return f"{_display(value)} is not a finite number", "use a plain number (.inf and .nan are not allowed)", loc
    if kind == "string_pattern_mismatch":
        return f"{_display(value)} does not have the expected form", f"use a value matching {ctx.get('pattern')}", loc
    if kind in _TYPE_WORDS:
        if value is None:
            return "null is given", f"use {_TYPE_WORDS[kind]}", loc
        number = _number_in_text(value) if kind in ("int_type", "float_type") else None
        if number is not None:
            # PyYAML reads YAML 1.1: `1e9` and `1.0e9` are strings there; only `1.0e+9` is a float (docs/references.md).
            if kind == "float_type":
                fix = f"write it as {number:.1e}"  # Python writes the dot and the sign: 1.0e+300
            elif number.is_integer() and abs(number) < 1e16:
                fix = f"write it as {int(number)}"
            else:
                fix = f"use {_TYPE_WORDS[kind]}"
            return (
                f"{_display(value)} is read as text, not a number (in YAML 1.1 an exponent needs a dot and a sign)",
                fix,
                loc,
            )
        got = type(value).__name__
        article = "an" if got[0] in "aeiou" else "a"
        return f"{_display(value)} is {article} {got}", f"use {_TYPE_WORDS[kind]}", loc
    return f"{_display(value)} is invalid ({error['msg']})", "see the example files under config/", loc


def _number_in_text(value: object) -> float | None:
    """The number a string spells in a form YAML 1.1 does not read as one (e.g. `1e9`), else None."""
    if not isinstance(value, str) or not any(c.isdigit() for c in value):
        return None
    try:
        number = float(value.replace("_", ""))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def problems_from(
    err: ValidationError, file: str, root: type[BaseModel], prefix: Sequence[str | int] = ()
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for error in err.errors(include_url=False):
        loc, _ = walk(error["loc"], root)
        _, holders = walk(error["loc"][:-1], root)
        problem, allowed, where = _describe(dict(error), holders[0] if len(holders) == 1 else None, loc)
        item = Problem(file, format_path([*prefix, *where]), cut_quoted(problem), cut_quoted(allowed))
        if item.field not in seen:  # a union reports one failure per branch: say the first, once per field
            seen.add(item.field)
            problems.append(item)
    return problems
