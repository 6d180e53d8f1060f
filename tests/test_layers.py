"""The import structure of `kvtier/` (design "Layers"): no circles, and no module imports a layer above its own.

Layers, bottom to top (a module may import its own package and any lower layer, never a higher one nor a sibling
package of its own layer, except in the layers of small shared modules):
facts -> config -> shared serving facts -> L2 connectors -> planner, bench -> simulate -> rules -> charts -> constructs
-> stacks -> entry points. The graph is read from the source with `ast`, so a lazy import inside a function counts too; imports
under `if TYPE_CHECKING:` are left out of the circle check only (they never run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "kvtier"

# (layer, module prefixes), lowest first. A prefix matches the module and everything below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "facts",
        (
            "kvtier.errors",
            "kvtier.naming",
            "kvtier.versions",
            "kvtier.catalog",
            "kvtier.addons",
            "kvtier.upstream",
            "kvtier.trace",
            "kvtier.stats",
            "kvtier.lambdas",
            "kvtier.k8s.curvine.scripts",
        ),
    ),
    ("config", ("kvtier.config",)),
    ("serving facts", ("kvtier.serving", "kvtier.sizing")),
    ("connectors", ("kvtier.connectors",)),
    ("planner and bench", ("kvtier.planner", "kvtier.bench")),
    ("simulator", ("kvtier.simulate",)),
    ("rules", ("kvtier.rules",)),
    ("charts", ("kvtier.k8s",)),
    ("constructs", ("kvtier.constructs",)),
    ("stacks", ("kvtier.stacks",)),
    (
        "entry points",
        (
            "kvtier.app",
            "kvtier.ops",
            "kvtier.cli",
            "kvtier.__main__",
        ),
    ),
]
SHARED_LAYERS = {"facts", "serving facts", "entry points"}
ROOT_PACKAGE = "kvtier"  # kvtier/__init__.py: the version only
# The pure layers import nothing from charts or constructs (design "Layers"), whatever their rank.
PURE = (
    "kvtier.planner",
    "kvtier.simulate",
    "kvtier.bench",
    "kvtier.serving",
    "kvtier.sizing",
    "kvtier.rules",
    "kvtier.connectors",
    "kvtier.stats",
)


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    type_checking: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _edges(modules: dict[str, Path]) -> list[Edge]:
    edges: list[Edge] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        guarded = _type_checking_lines(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                targets = submodules if len(submodules) == len(node.names) else [base, *submodules]
            for target in targets:
                if target in modules and target != name:
                    edges.append(Edge(name, target, node.lineno, node.lineno in guarded))
    return edges


def _layer(module: str) -> int:
    if module == ROOT_PACKAGE:
        return 0
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}")


def _shared(module: str) -> bool:
    """Layers of small independent modules, which may import each other (circles are still refused)."""
    return LAYERS[_layer(module)][0] in SHARED_LAYERS


def _package(module: str) -> str:
    """The unit inside which modules may import each other freely (e.g. kvtier.bench, kvtier.k8s)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _upward(edges: list[Edge]) -> list[str]:
    return [
        f"{e.source}:{e.line} imports {e.target} ({LAYERS[_layer(e.target)][0]} is above {LAYERS[_layer(e.source)][0]})"
        for e in edges
        if _package(e.source) != _package(e.target)
        and (_layer(e.target) > _layer(e.source) or (_layer(e.target) == _layer(e.source) and not _shared(e.source)))
    ]


def _circles(edges: list[Edge]) -> list[str]:
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_checking:
            graph.setdefault(e.source, set()).add(e.target)
    cycles: list[str] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return cycles


@pytest.fixture(scope="module")
def edges() -> list[Edge]:
    return _edges(_modules())


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        _layer(module)


def test_no_module_imports_a_layer_above_it(edges: list[Edge]) -> None:
    assert _upward(edges) == []


def test_pure_layers_import_no_charts_or_constructs(edges: list[Edge]) -> None:
    impure = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in edges
        if e.source.startswith(PURE) and e.target.startswith(("kvtier.k8s", "kvtier.constructs", "kvtier.stacks"))
    ]
    assert impure == []


def test_no_import_circles(edges: list[Edge]) -> None:
    assert _circles(edges) == []


def test_the_checks_find_a_planted_upward_import_and_circle(tmp_path: Path) -> None:
    """The checks above can fail: a planner module importing a stack is upward, and two config modules importing
    each other are a circle (a TYPE_CHECKING-only import is not)."""
    (tmp_path / "kvtier" / "config").mkdir(parents=True)
    upward = tmp_path / "kvtier" / "planned.py"
    upward.write_text("from kvtier.stacks import lob\n")
    first, second = tmp_path / "kvtier" / "config" / "a.py", tmp_path / "kvtier" / "config" / "b.py"
    first.write_text("from kvtier.config import b\n")
    second.write_text("from typing import TYPE_CHECKING\nimport kvtier.config.a\n")
    modules = {**_modules(), "kvtier.planner.planted": upward, "kvtier.config.a": first, "kvtier.config.b": second}
    found = _edges(modules)
    assert _upward(found) == ["kvtier.planner.planted:1 imports kvtier.stacks.lob (stacks is above planner and bench)"]
    assert _circles(found) == ["kvtier.config.a -> kvtier.config.b -> kvtier.config.a"]
    second.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import kvtier.config.a\n")
    assert _circles(_edges(modules)) == []


def test_product_root_keeps_only_shared_modules() -> None:
    """Issue 29: the package root holds what several layers share; everything else lives in its layer's package."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 10, loose


def test_the_product_never_imports_the_project_tools() -> None:
    """`tools/` (benchmarks of the synth, the set-up and the simulator) is development tooling, not product."""
    offenders = [
        f"{name}: imports {target}"
        for name, path in _modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        if target == "tools" or target.startswith("tools.")
    ]
    assert offenders == []


def test_tests_mirror_the_package() -> None:
    """Each test lives in the folder of the layer it tests; only project-wide checks stay at the root of tests/."""
    tests = ROOT / "tests"
    allowed_root = {"test_layers.py", "test_docs.py", "test_pins.py", "test_packaging.py", "test_sources.py"}
    assert sorted(p.name for p in tests.glob("test_*.py")) == sorted(allowed_root)
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    for folder in (p for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        assert folder.name in packages | {"tools", "engine"}, f"tests/{folder.name}/ mirrors no kvtier package"


# ---- the L2 connector seam (issue 41) -------------------------------------------------------------------------------

CONNECTORS_PACKAGE = PACKAGE / "connectors"


def _connector_names() -> set[str]:
    """The `cache.connector` values, read from the config's `Connector` literal (not imported: this file stays AST)."""
    tree = ast.parse((PACKAGE / "config" / "endpoint.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "Connector" for t in node.targets):
            return {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    raise AssertionError("kvtier/config/endpoint.py defines no `Connector` literal")


def _mentions_connector(node: ast.AST) -> bool:
    """`x.connector`, a name like `connector`/`DEFAULT_CONNECTOR`, or the identity fact key "connector"."""
    if isinstance(node, ast.Attribute):
        return node.attr == "connector"
    if isinstance(node, ast.Name):
        return "connector" in node.id.lower()
    return isinstance(node, ast.Constant) and node.value == "connector"


def connector_branches(tree: ast.AST, names: set[str]) -> list[str]:
    """Every place that decides by the connector's name: comparing it with a name, a lookup keyed by it, a match on
    it, a table keyed by names, a name kept in a variable; `line: what`."""

    def is_name(node: ast.AST | None) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(is_name(e) for e in node.elts)
        return isinstance(node, ast.Constant) and node.value in names

    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_name(s) for s in sides) and any(_mentions_connector(n) for s in sides for n in ast.walk(s)):
                found.append(f"{line}: compares the connector with a name: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and any(_mentions_connector(n) for n in ast.walk(node.slice)):
            found.append(f"{line}: looks up by the connector: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and any(_mentions_connector(n) for n in ast.walk(node.args[0])):
                found.append(f"{line}: looks up by the connector: {ast.unparse(node)}")
            elif any(is_name(a) for a in node.args[1:]):
                found.append(f"{line}: a connector name as a lookup's default: {ast.unparse(node)}")
        elif isinstance(node, ast.Match) and any(_mentions_connector(n) for n in ast.walk(node.subject)):
            found.append(f"{line}: matches on the connector: match {ast.unparse(node.subject)}")
        elif isinstance(node, ast.Dict) and any(is_name(k) for k in node.keys):
            found.append(f"{line}: a table keyed by connector names")
        elif isinstance(node, ast.DictComp) and any(_mentions_connector(n) for n in ast.walk(node.key)):
            found.append(f"{line}: a table keyed by the connector: {ast.unparse(node)}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and is_name(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_mentions_connector(n) for t in targets for n in ast.walk(t)) and not isinstance(
                node, ast.AnnAssign
            ):
                found.append(f"{line}: keeps a connector name: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_connectors_branches_on_the_connector_name() -> None:
    """Design "L2 connectors": everything connector-specific lives in kvtier/connectors/, one module per connector;
    every other module asks `connector_for(...)`. (The config's own `connector: Connector = "lmcache"` field default
    is an annotated declaration, not a decision, and passes.)"""
    names = _connector_names()
    assert names == {"lmcache", "vllm"}
    offenders = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if CONNECTORS_PACKAGE not in path.parents
        for where in connector_branches(ast.parse(path.read_text(), str(path)), names)
    ]
    assert offenders == [], "\n".join(offenders)


# Branches as they were before the seam (d340343), one per kind the guard must find.
OLD_BRANCHES = {
    "kvtier/serving.py": 'def f(endpoint):\n    return endpoint.block_size if endpoint.cache.connector == "vllm" else 1\n',
    "kvtier/k8s/standalone.py": 'def f(endpoint):\n    if endpoint.cache.connector != "vllm":\n        return {}\n',
    "kvtier/serving.py (lmcache_config)": 'def f(cache):\n    if cache.connector != "lmcache" or cache.l1_gb == 0:\n        return {}\n',
    "kvtier/ops/probe.py (table)": "SIGNALS = {s.connector: s for s in (LMCACHE_SIGNALS, VLLM_SIGNALS)}\n",
    "kvtier/ops/probe.py (lookup)": 'x = SIGNALS[chosen.get((lob, ep), "lmcache")]\n',
    "kvtier/rules/day2.py (default)": 'DEFAULT_CONNECTOR = "lmcache"\n',
    "kvtier/rules/day2.py (facts)": "before = old.get('connector', DEFAULT_CONNECTOR)\n",
    "kvtier/rules/day2.py (meanings)": 'FACT_MEANING = {"schema": "s", "lmcache": "another LMCache version in the image"}\n',
    "a lookup keyed by the connector": "signals = SIGNALS[endpoint.cache.connector]\n",
    "a match": 'match endpoint.cache.connector:\n    case "vllm":\n        pass\n',
}


@pytest.mark.parametrize("where", sorted(OLD_BRANCHES))
def test_the_connector_guard_finds_every_kind_of_branch(where: str) -> None:
    found = connector_branches(ast.parse(OLD_BRANCHES[where]), _connector_names())
    assert len(found) >= 1, where


def test_the_connector_guard_lets_the_seam_through() -> None:
    """Asking the seam, passing a name to it and comparing connectors as objects are not branches."""
    fine = (
        "connector = connector_for(endpoint)\n"
        "names = {(lob, e.name): e.cache.connector for e in endpoints}\n"
        "x = connector_named(chosen.get((lob, ep), DEFAULT_CONNECTOR.name))\n"
        "same = connector is not runs\n"
        'image = "vllm/vllm-openai:v0.19.0"\n'
    )
    assert connector_branches(ast.parse(fine), _connector_names()) == []
