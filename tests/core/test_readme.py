"""The README's Python blocks run as pasted (``test_docs_blocks`` runs those of ``docs/``).

A block whose first line is ``# a sketch: ...`` names what the reader supplies and is
left out; every other block is saved as a script and run in a fresh interpreter (as a user
who pastes it into a file would: a script that starts processes must guard its main code),
with ``/tmp/`` paths moved into the test's own directory so that runs never share a store.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md",)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            code = match.group(1)
            if not code.startswith("# a sketch:"):
                found.append((page, text.count("\n", 0, match.start()) + 1, code))
    return found


BLOCKS = _blocks()


def test_the_pages_hold_runnable_blocks() -> None:
    assert len([b for b in BLOCKS if b[0] == "README.md"]) >= 3


@pytest.mark.parametrize(("page", "line", "code"), BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_a_block_runs_as_pasted(page: str, line: int, code: str, tmp_path: Path) -> None:
    script = tmp_path / "pasted.py"
    script.write_text(code.replace("file:///tmp/", f"file://{tmp_path}/"))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{page} line {line} failed:\n{done.stderr[-3000:]}"
