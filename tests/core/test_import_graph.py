"""The package's modules import each other without a circle, and each room keeps to itself.

Every import counts: at module level, under ``if TYPE_CHECKING:`` and inside functions (a
circle there does not deadlock an import, but it still ties two modules into one). A
package importing its own submodules is not a circle, nor is ``from pkg import submodule``,
which names the submodule, not the package's ``__init__``.
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
        for node in ast.walk(ast.parse(path.read_text())):  # every import, at any depth
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


def _imports_of(prefix: str) -> dict[str, set[str]]:
    """What each module at or under ``prefix`` imports from the package, at any depth."""
    edges = _edges(_modules())
    return {m: t for m, t in edges.items() if m == prefix or m.startswith(prefix + ".")}


#: The patterns, each a room of its own (the exchange lives in ``gradientmail._exchange``).
PATTERNS = (
    "gradientmail.patterns.shared_queue",
    "gradientmail.patterns.pipeline",
    "gradientmail._exchange",
)


def _inside(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_the_patterns_root_imports_no_pattern() -> None:
    """``patterns/*.py`` holds what the patterns share (leases, claims, workers, layout)."""
    root = {
        m: t
        for m, t in _imports_of("gradientmail.patterns").items()
        if not any(_inside(m, room) for room in PATTERNS)
    }
    assert len(root) > 5, "the walk found the shared modules"
    for module, targets in root.items():
        assert not {t for t in targets for room in PATTERNS if _inside(t, room)}, module


def test_no_pattern_imports_another() -> None:
    for room in PATTERNS:
        others = [other for other in PATTERNS if other != room]
        for module, targets in _imports_of(room).items():
            crossing = {t for t in targets for other in others if _inside(t, other)}
            assert not crossing, f"{module} imports {sorted(crossing)}"


def test_the_claim_policy_imports_neither_the_mailbox_nor_leases() -> None:
    """The policy decides; it sees the store only through the page reader it is handed."""
    policy = "gradientmail.patterns.shared_queue._policy"
    found = _imports_of(policy)
    assert len(found) >= 4, "the walk found the policy's modules"
    store = ("gradientmail.mailbox", "gradientmail.backends", "gradientmail._urls")
    leases = ("gradientmail.patterns._leases", "gradientmail.patterns._lease_watch")
    queue = "gradientmail.patterns.shared_queue"
    for module, targets in found.items():
        banned = {t for t in targets if any(_inside(t, room) for room in store + leases)}
        assert not banned, f"{module} imports {sorted(banned)}"
        # Nor the rest of the queue: the loader drives the policy, never the reverse.
        rest = {t for t in targets if _inside(t, queue) and not _inside(t, policy)}
        assert not rest, f"{module} imports {sorted(rest)}"
