"""How Kyverno 1.19 evaluates a `deny` condition, as close as this project can get without Kyverno (no Kyverno CLI or
API server runs here: docs/security.md "How the admission rules are tested"). Read in `kyverno/kyverno@v1.19.0`:

- a whole-string variable `{{ expr }}` is `ctx.Query(expr)` and keeps its type (`pkg/engine/variables/vars.go`);
- Kyverno's JMESPath fork fails on a key missing from an object (`NotFoundError`) where the reference
  implementation returns null, and only some expressions swallow that failure (comparisons, function arguments,
  multi-selects, `||`, the left of `&&`, `!`, pipes, projections and filters): `KyvernoInterpreter` below, read in
  `kyverno/go-jmespath` `interpreter.go` (docs/references.md: the fork at the commit Kyverno pins is not in the store,
  so it was read at its last public master);
- a variable that fails makes the condition, then the rule, an error (`pkg/engine/variables/evaluate.go`
  `Evaluate`), and an error blocks the request under `failurePolicy: Fail` (`pkg/utils/engine/response.go`
  `BlockRequest`): `UnresolvedError` here;
- the operators (`pkg/engine/variables/operator/`): `Equals`/`NotEquals` compare strings with the value as a
  wildcard pattern, and other types only with their own type; `AnyNotIn` compares strings with wildcards in both
  directions (`anyin.go` `isAnyNotIn`), and a key that is neither a string, a number, a bool nor a list is never
  "not in"; `GreaterThan` compares numbers. Wildcards are `*` (any run) and `?` (one character), IGLOU-EU/go-wildcard
  v1.0.3 (`ext/wildcard/match.go`). Not emulated: Equals' duration and resource-quantity parsing (no guard value is
  one).
"""

from __future__ import annotations

import re
from typing import Any

import jmespath  # type: ignore[import-untyped]
from jmespath.visitor import TreeInterpreter  # type: ignore[import-untyped]

_WHOLE = re.compile(r"^\{\{(?P<expr>(?:(?!\{\{|\}\}).)*)\}\}$")


class UnresolvedError(Exception):
    """A variable Kyverno cannot resolve: the rule errors, and the request is refused (failurePolicy Fail)."""


class _NotFoundError(Exception):
    pass


class KyvernoInterpreter(TreeInterpreter):  # type: ignore[misc]
    """The reference interpreter with the fork's NotFoundError: raised by a field missing from an object, swallowed
    where the fork swallows it (module doc)."""

    def _soft(self, node: dict[str, Any], value: Any) -> Any:
        try:
            return self.visit(node, value)
        except _NotFoundError:
            return None

    def visit_field(self, node: dict[str, Any], value: Any) -> Any:
        if isinstance(value, dict):
            if node["value"] not in value:
                raise _NotFoundError(node["value"])
            return value[node["value"]]
        return None

    def visit_comparator(self, node: dict[str, Any], value: Any) -> Any:
        left, right = (self._soft(child, value) for child in node["children"])
        if node["value"] in ("eq", "ne"):
            return (left == right) == (node["value"] == "eq")
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right))
        return self.COMPARATOR_FUNC[node["value"]](left, right) if numbers else None

    def visit_function_expression(self, node: dict[str, Any], value: Any) -> Any:
        args = [self._soft(child, value) for child in node["children"]]
        return self._functions.call_function(node["value"], args)

    def visit_filter_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self._soft(node["children"][0], value)
        if not isinstance(base, list):
            return None
        kept = [e for e in base if not self._is_false(self._soft(node["children"][2], e))]
        return [r for e in kept if (r := self._soft(node["children"][1], e)) is not None]

    def visit_flatten(self, node: dict[str, Any], value: Any) -> Any:
        base = self._soft(node["children"][0], value)
        if not isinstance(base, list):
            return None
        return [item for e in base for item in (e if isinstance(e, list) else [e])]

    def visit_multi_select_list(self, node: dict[str, Any], value: Any) -> Any:
        return None if value is None else [self._soft(child, value) for child in node["children"]]

    def visit_multi_select_dict(self, node: dict[str, Any], value: Any) -> Any:
        if value is None:
            return None
        return {child["value"]: self._soft(child["children"][0], value) for child in node["children"]}

    def visit_or_expression(self, node: dict[str, Any], value: Any) -> Any:
        matched = self._soft(node["children"][0], value)
        return self._soft(node["children"][1], value) if self._is_false(matched) else matched

    def visit_and_expression(self, node: dict[str, Any], value: Any) -> Any:
        matched = self._soft(node["children"][0], value)
        return matched if self._is_false(matched) else self.visit(node["children"][1], value)

    def visit_not_expression(self, node: dict[str, Any], value: Any) -> Any:
        return self._is_false(self._soft(node["children"][0], value))

    def visit_pipe(self, node: dict[str, Any], value: Any) -> Any:
        for child in node["children"]:
            value = self._soft(child, value)
        return value

    def visit_projection(self, node: dict[str, Any], value: Any) -> Any:
        base = self._soft(node["children"][0], value)
        if not isinstance(base, list):
            return None
        return [r for e in base if (r := self._soft(node["children"][1], e)) is not None]


def query(expr: str, data: dict[str, Any]) -> Any:
    """`ctx.Query(expr)`: raises UnresolvedError where Kyverno fails the variable."""
    try:
        return KyvernoInterpreter().visit(jmespath.compile(expr.strip()).parsed, data)
    except _NotFoundError as missing:
        raise UnresolvedError(f"JMESPath query failed: Unknown key {missing} in path ({expr.strip()})") from None


def substitute(value: Any, ctx: dict[str, Any]) -> Any:
    """A condition's key or value: a string that is one `{{ }}` is queried; anything else is kept as it is."""
    whole = _WHOLE.match(value) if isinstance(value, str) else None
    if whole:
        return query(whole["expr"], ctx)
    if isinstance(value, str) and "{{" in value:
        raise AssertionError(f"the emulation substitutes whole variables only: {value}")
    return value


def wildcard(pattern: str, name: str) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.DOTALL) is not None


def _scalar(key: Any) -> bool:
    return isinstance(key, (str, int, float, bool))


def _text(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)  # Go's fmt.Sprint


def holds(condition: dict[str, Any], ctx: dict[str, Any]) -> bool:
    """One condition of a `deny` block (raises UnresolvedError when a variable fails)."""
    key, value, op = substitute(condition["key"], ctx), substitute(condition["value"], ctx), condition["operator"]
    if op in ("Equals", "NotEquals"):
        if isinstance(key, str):
            equal = isinstance(value, str) and wildcard(value, key)
        elif isinstance(key, (bool, int, float, dict, list)):
            equal = type(key) is type(value) and bool(key == value)
        else:
            return False  # an unsupported key type: the handler answers false
        return bool(equal) is (op == "Equals")
    if op == "GreaterThan":
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (key, value))
        return bool(numbers and key > value)
    if op == "AnyNotIn":
        if not (_scalar(key) or isinstance(key, list)) or not isinstance(value, list):
            return False
        keys = [_text(k) for k in (key if isinstance(key, list) else [key])]
        allowed = [_text(v) for v in value]
        return any(not any(wildcard(k, a) or wildcard(a, k) for a in allowed) for k in keys)
    raise AssertionError(f"the emulation does not know operator {op}")
