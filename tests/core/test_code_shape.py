"""The shape the package keeps so that a newcomer can find their room: small files, small
classes. A file over 400 lines, or a class holding more than 12 attributes, fails here.

Attributes are what a class holds: its annotated class-level fields (a dataclass's fields)
and every ``self.NAME`` it assigns. No class is exempt: a record of many figures nests them
by concern (``queue.stats.cost``, ``exchange.stats.traffic``, ``read_status(box).epochs``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import gradientmail

SRC = Path(gradientmail.__file__).resolve().parent
MAX_LINES = 400
MAX_ATTRIBUTES = 12


def attributes(node: ast.ClassDef) -> set[str]:
    """The attributes a class body declares or its methods assign on ``self``."""
    names: set[str] = set()
    for statement in node.body:
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and "ClassVar" not in ast.unparse(statement.annotation)
        ):
            names.add(statement.target.id)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(statement):
                targets: list[ast.expr] = []
                if isinstance(inner, ast.Assign):
                    targets = inner.targets
                elif isinstance(inner, (ast.AnnAssign, ast.AugAssign)):
                    targets = [inner.target]
                for target in targets:
                    for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if (
                            isinstance(element, ast.Attribute)
                            and isinstance(element.value, ast.Name)
                            and element.value.id == "self"
                        ):
                            names.add(element.attr)
    return names


def classes() -> dict[str, int]:
    """``path:line Class`` → how many attributes it holds, for every class in the package."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where = f"{path.relative_to(SRC)}:{node.lineno} {node.name}"
                found[where] = len(attributes(node))
    return found


def test_no_source_file_passes_400_lines() -> None:
    long = {
        str(path.relative_to(SRC)): lines
        for path in SRC.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_class_holds_more_than_12_attributes() -> None:
    large = {where: count for where, count in classes().items() if count > MAX_ATTRIBUTES}
    assert large == {}


def test_the_counter_counts_fields_and_self_assignments() -> None:
    tree = ast.parse(
        "class C:\n"
        "    x: int\n"
        "    y: ClassVar[int]\n"
        "    def __init__(self):\n"
        "        self.a, self.b = 1, 2\n"
        "        self.c: int = 3\n"
        "        self.a += 1\n"
        "        other.d = 4\n"
    )
    (node,) = tree.body
    assert isinstance(node, ast.ClassDef)
    assert attributes(node) == {"x", "a", "b", "c"}
