"""Every example runs as a user would run it, at a small size, and does what it says.

An example is a script to copy; what measures it lives in a helper beside it
(``demo_compare.py``, ``pipeline_harness.py``), and no example is left unrun: the last test
here fails for a new file in ``examples/`` that no test runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gradientmail import from_url
from gradientmail._exchange.report import read_shared_models
from gradientmail.status import read_status

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: Examples run by a test elsewhere, next to what they show.
RUN_ELSEWHERE = {
    "claim_race.py": "tests/conformance/test_race_cli.py",
    "train_ddp.py": "tests/torch/test_torch_ddp.py",
}
#: Not examples: the measuring around them, imported by an example or a benchmark.
HELPERS = {"demo_compare.py", "pipeline_harness.py"}
#: Run here.
RUN_HERE = {
    "demo.py",
    "pipeline_processes.py",
    "pipeline_threads.py",
    "preprocess.py",
    "train_shared_queue.py",
}


def run(script: str, *args: str) -> str:
    """Run ``examples/script`` in a fresh interpreter; return its stdout (it must exit 0)."""
    done = subprocess.run(  # the timeout is a hang
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def status_command_url(out: str) -> str:
    """The URL of the ``gradientmail status URL`` line an example prints at its end."""
    return out.split(" status ", 1)[1].split()[0]  # also .venv/bin/gradientmail status


@pytest.mark.slow
def test_the_demo_trains_one_model_and_prints_the_status_command() -> None:
    # demo.py is make demo: train_shared_queue.py's main with the same arguments.
    out = run("demo.py", "--shards", "8", "--batches", "2", "--batch-ms", "5")
    assert "makespan" in out
    status = read_status(from_url(status_command_url(out)))
    assert status.total == 8
    assert status.left == 0
    # The four learners trained one shared model, and its two peers ran beside it.
    assert "training one shared model" in out
    assert re.search(r"one shared model: final held-out loss \d\.\d+ .*\(best \d\.\d+ at", out)
    assert re.search(r"the fastest learner alone \(16 a step, x 1\): +held-out loss \d", out)
    assert re.search(r"lockstep, batches in proportion to speed \(16\+8\+8\+4 a step, x 1.5\)", out)
    (head,) = read_shared_models(from_url(status_command_url(out))).values()
    assert not isinstance(head, str)
    assert sorted(head.learners) == [f"learner-{n}" for n in range(4)]
    assert all(entry.left for entry in head.learners.values())
    # Every learner that trained applied its steps; one that got no shard had none to apply.
    trained = {r["learner"] for r in status.learners if (r.get("units_finished") or 0) > 0}
    assert trained, "some learner trained"
    assert {name for name, entry in head.learners.items() if entry.seq >= 1} == trained


@pytest.mark.parametrize(
    ("factors", "message"),
    [
        ("lokstep=2", "unknown method 'lokstep': name shared, lockstep, alone"),
        ("shared=fast", "'shared=fast' is not METHOD=NUMBER"),
        ("alone=0", "'alone=0': the factor must be above 0"),
    ],
)
def test_a_wrong_lr_factor_is_refused_by_name(factors: str, message: str) -> None:
    done = subprocess.run(  # the timeout is a hang
        [sys.executable, str(EXAMPLES / "train_shared_queue.py"), "--lr-factors", factors],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_independent_models_share_the_queue_with_no_exchange() -> None:
    # Two learners, not four: each process spends most of its time importing torch.
    args = ("--shards", "4", "--batches", "1", "--batch-ms", "2", "--slowdowns", "1,2")
    out = run("train_shared_queue.py", *args, "--independent")
    assert "each training its own independent model" in out
    assert "one shared model" not in out
    url = status_command_url(out)
    status = read_status(from_url(url))
    assert (status.total, status.left) == (4, 0)
    assert read_shared_models(from_url(url)) == {}
    rows = table(out, r"(learner-\d) +\S+x +(\d+) ")
    assert len(rows) == 2
    assert sum(int(units) for _, units in rows) == 4


def table(out: str, pattern: str) -> list[Any]:
    """The rows of an example's printed table that match ``pattern``."""
    return [m.groups() for m in map(re.compile(pattern).match, out.splitlines()) if m]


def test_pipeline_threads_feeds_every_drafter_and_loses_nothing() -> None:
    out = run("pipeline_threads.py", "--seconds", "0.3")
    total = int(out.split(" hidden states trained on")[0].split()[-1])
    rows = table(out, r"\s+(drafter-\d): +(\d+) items")
    assert len(rows) == 3
    assert all(int(items) > 0 for _, items in rows)
    assert sum(int(items) for _, items in rows) == total > 0


def test_pipeline_processes_trains_on_every_batch() -> None:
    args = ("--producers", "3", "--batches", "12", "--train-time", "0.01")
    out = run("pipeline_processes.py", *args, "--gen-time", "0.01", "0.02")
    assert "3 generators → 1 trainer, 12 batches" in out
    assert re.search(r"trained in \d+\.\d+ s; training alone takes 0\.12 s", out), out


def test_preprocess_tokenises_every_shard_exactly_once() -> None:
    out = run("preprocess.py", "--shards", "9", "--slowdowns", "1,2", "--shard-ms", "20")
    assert "9 of 9 shards tokenised, each exactly once: True" in out
    rows = table(out, r"(\S+) +(\d+)x +(\d+) +(\d+)$")
    assert len(rows) == 2
    assert sum(int(shards) for *_, shards, _tokens in rows) == 9
    status = read_status(from_url(status_command_url(out)))
    assert (status.total, status.left) == (9, 0)


def test_every_example_is_run_by_a_test() -> None:
    present = {path.name for path in EXAMPLES.glob("*.py")}
    assert present == RUN_HERE | set(RUN_ELSEWHERE) | HELPERS
    root = EXAMPLES.parent
    for script, test in RUN_ELSEWHERE.items():
        assert script in (root / test).read_text(), f"{test} no longer runs {script}"
    users = "".join(p.read_text() for p in [*EXAMPLES.glob("*.py"), *root.glob("benchmarks/*.py")])
    for helper in HELPERS:
        assert f"import {helper.removesuffix('.py')}" in users, f"nothing imports {helper}"
