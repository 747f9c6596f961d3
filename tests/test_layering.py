"""The import graph of ``hermes_actors``: no cycles, and packages only import downwards.

Every ``import`` statement counts, wherever it is (module level, inside a function, under
``TYPE_CHECKING``), and so do the module names of the lazy export tables (``_EXPORTS``).
The layers, lowest first: ``_versions``; ``errors``/``_lazy``/``_green``; ``model``; ``config``; ``cluster``;
``store``, ``agents`` and ``adapters``; ``runtime``; ``testing``; ``process``; ``cli``;
``__main__`` and the package itself. A package may import its own modules and those of lower
layers only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hermes_actors"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"_versions"}),
    frozenset({"errors", "_lazy", "_green"}),
    frozenset({"model"}),
    frozenset({"config"}),
    frozenset({"cluster"}),
    frozenset({"store", "agents", "adapters"}),
    frozenset({"runtime"}),
    frozenset({"testing"}),
    frozenset({"process"}),
    frozenset({"cli"}),
    frozenset({"__main__", ""}),
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if MODULES[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> set[str]:
    """The ``hermes_actors`` modules ``module`` imports, however and wherever it does."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                found.update(v.value for v in node.value.values
                             if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return {name for name in found if name in MODULES and name != module}


GRAPH = {module: _imports(module) for module in MODULES}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer(package: str) -> int:
    for number, members in enumerate(LAYERS):
        if package in members:
            return number
    raise AssertionError(f"package {package!r} has no layer: add it to LAYERS")


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in GRAPH[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(GRAPH):
        if node not in index:
            visit(node)
    return found


class TestImportGraph:
    """The architecture's layering holds in the code itself."""

    def test_the_graph_sees_deferred_imports(self):
        # the command line imports the store only inside functions
        assert any(m.startswith("hermes_actors.store") for m in
                   GRAPH["hermes_actors.process.inspect"])

    def test_no_module_cycle(self):
        assert _cycles() == []

    @pytest.mark.parametrize("module", sorted(GRAPH))
    def test_imports_go_down_the_layers(self, module):
        mine = _layer(_package(module))
        upward = sorted(other for other in GRAPH[module]
                        if _package(other) != _package(module)
                        and _layer(_package(other)) >= mine)
        assert upward == [], f"{module} imports a package at or above its layer"

    def test_the_model_knows_neither_config_nor_store(self):
        for module, imported in GRAPH.items():
            if _package(module) == "model":
                assert not {_package(m) for m in imported} & {"config", "store"}, module
