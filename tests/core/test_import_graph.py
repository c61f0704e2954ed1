"""The package's modules import each other without a circle.

Module-level imports only (those under ``if TYPE_CHECKING:`` or inside functions run later,
and cannot deadlock an import). A package importing its own submodules is not a circle, nor
is ``from pkg import submodule``, which names the submodule, not the package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gradientmail

ROOT = Path(gradientmail.__file__).parent


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(("gradientmail", *path.relative_to(ROOT).with_suffix("").parts))
        modules[name.removesuffix(".__init__")] = path
    return modules


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                submodules = {f"{node.module}.{a.name}" for a in node.names}
                named = submodules & modules.keys()
                targets |= named if len(named) == len(node.names) else {node.module, *named}
        edges[name] = {t for t in targets if t in modules and t != name}
        edges[name] -= {t for t in edges[name] if t.startswith(name + ".")}
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_package_imports_itself_through_others() -> None:
    modules = _modules()
    assert len(modules) > 50, "the walk found the package's modules"
    assert _circles(_edges(modules)) == []


def test_the_circle_finder_finds_a_planted_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]
