"""Whether the suite was started from a script's top level without a ``__main__`` guard.

The process races start their racers with multiprocessing's ``spawn``, which imports the
main script again in every racer. A script that runs the suite at its top level, outside
``if __name__ == "__main__":``, would run it again in each racer, and the racers would die
in multiprocessing's bootstrapping check before racing: the store would be blamed for the
script's mistake. The suite looks for that mistake before it starts any process, by finding
the line of the main script that led to the call and reading whether a guard encloses it.
"""

from __future__ import annotations

import ast
import sys
from types import FrameType

__all__ = ["unguarded_main_call"]


def unguarded_main_call(frame: FrameType | None = None) -> str | None:
    """``"script.py:LINE"`` when the main script calls into the suite unguarded, else ``None``.

    Only a main module that ``spawn`` imports again counts: one with a source file (not
    ``python -c``, an interactive session or a notebook). An unreadable source is taken as
    guarded: the check never stops a run it cannot judge.
    """
    frame = frame or sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            path = frame.f_code.co_filename
            if path.startswith("<") or not _unguarded(path, frame.f_lineno):
                return None
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _unguarded(path: str, line: int) -> bool:
    try:
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read(), path)
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            last = max(getattr(n, "end_lineno", n.lineno) or n.lineno for n in node.body)
            if node.body[0].lineno <= line <= last:
                return False
    return True


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]
