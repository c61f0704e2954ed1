"""The mutation table (``scripts/mutants.py``) still names the code and tests it mutates.

``make mutants`` takes most of an hour, so it is not part of CI; and a table entry whose
original text no longer occurs in the code, or whose test was renamed, stops that run at
its first check. Four such entries once went unnoticed for two sessions, during which no
mutant ran. This reads the table against the tree, in well under a second.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _table() -> tuple[Any, ...]:
    spec = importlib.util.spec_from_file_location("mutants_table", ROOT / "scripts" / "mutants.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return tuple(module.MUTANTS)


MUTANTS = _table()


def test_the_table_is_read() -> None:
    assert len(MUTANTS) > 100


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_original_occurs_once_and_each_test_named_exists(mutant: Any) -> None:
    source = (ROOT / "src" / "gradientmail" / mutant.file).read_text()
    for original, replacement in mutant.edits:
        assert source.count(original) == 1, f"the code moved; update the table: {original!r}"
        assert replacement != original
    for node in mutant.tests:
        path, _, name = node.partition("::")
        assert (ROOT / path).is_file(), f"no test file {path}"
        if name:
            function = re.escape(name.split("[")[0])
            text = (ROOT / path).read_text()
            assert re.search(rf"^def {function}\(", text, re.M), f"no test {node}"
