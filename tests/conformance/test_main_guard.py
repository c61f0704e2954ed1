"""The docs' programmatic use, pasted as a script without ``if __name__ == "__main__":``.

Multiprocessing's spawn imports the script again in every racer process; unguarded, each
racer would run the suite again, the report printed many times and the verdict blaming the
store. The suite finds the missing guard before it starts a process: the process races are
INCONCLUSIVE with the fix, and the report is printed once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SUITE = """\
from gradientmail import from_url
from gradientmail.conformance import SuiteOptions, run_suite
from gradientmail.conformance._properties import select_properties

box = from_url("file://{root}")
props = select_properties("precondition-honoured,race-processes")
"""


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "check_my_store.py"
    script.write_text(SUITE.format(root=tmp_path / "box") + textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )


UNGUARDED = """\
report = run_suite(box, SuiteOptions(quick=True), properties=props)
print("\\n".join(report.lines()))
"""

GUARDED = """\
def main():
    report = run_suite(box, SuiteOptions(quick=True), properties=props)
    print("\\n".join(report.lines()))

if __name__ == "__main__":
    main()
"""


def test_an_unguarded_script_is_told_the_fix_and_runs_once(tmp_path: Path) -> None:
    done = run_script(tmp_path, UNGUARDED)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    verdicts = [line for line in lines if line.startswith("verdict:")]
    assert len(verdicts) == 1, done.stdout  # the script ran once, in one process
    assert verdicts[0].startswith("verdict: INCONCLUSIVE"), verdicts[0]
    assert "store is unsafe" in verdicts[0]  # "nothing here says the store is unsafe"
    (race,) = [
        line for line in lines if "race-processes" in line and line[:4] in ("INCO", "FAIL", "PASS")
    ]
    assert race.startswith("INCONCLUSIVE"), race
    assert "check_my_store.py:7" in race
    assert 'if __name__ == "__main__":' in race
    assert any(line.startswith("PASS  precondition-honoured") for line in lines)
    assert "bootstrapping" not in done.stderr


def test_a_guarded_script_races_processes(tmp_path: Path) -> None:
    done = run_script(tmp_path, GUARDED)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("PASS  race-processes") for line in lines), done.stdout
    assert lines[-1].startswith("verdict: PASS"), lines[-1]


@pytest.mark.parametrize(
    ("source", "line", "unguarded"),
    [
        ("run()\n", 1, True),
        ('if __name__ == "__main__":\n    run()\n', 2, False),
        ('if "__main__" == __name__:\n    x = 1\n    run()\n', 3, False),
        ('if __name__ == "__main__":\n    pass\nrun()\n', 3, True),
        ('if __name__ != "__main__":\n    run()\n', 2, True),
    ],
)
def test_the_guard_is_read_from_the_script(
    tmp_path: Path, source: str, line: int, unguarded: bool
) -> None:
    from gradientmail.conformance._main_guard import _unguarded

    path = tmp_path / "s.py"
    path.write_text(source)
    assert _unguarded(str(path), line) is unguarded
