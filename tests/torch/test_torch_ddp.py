"""Synchronous DDP over a shared queue under torchrun: 2 ranks (gloo, CPU), one slowed.

It runs ``examples/train_ddp.py`` as a user would. Shards hold 1 to 3 batches and an epoch
has an odd number of batches, so the two ranks always end an epoch with different step
counts: without ``model.join()`` the run would hang in its last all-reduce.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from gradientmail import from_url
from gradientmail.status import read_status

pytest.importorskip("torch")  # the ranks import it; CI has it (the torch extra)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
SHARDS = 10  # 1 + i % 3 batches each: 19 per epoch, odd
EPOCHS = 2
#: The run takes about 20 s on a loaded 2-core machine, most of it importing torch three
#: times; a hang would last until gloo's 30-minute timeout.
BOUND_S = 120


def test_uneven_ranks_end_cleanly_with_equal_parameters_and_every_batch_once(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    url = f"file://{tmp_path / 'run'}"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(EXAMPLE),
        "--url",
        url,
        "--shards",
        str(SHARDS),
        "--epochs",
        str(EPOCHS),
        "--workers",
        "1",
        "--slow-rank",
        "1",
        "--step-ms",
        "10",
        "--out",
        str(out),
    ]
    began = time.monotonic()
    # Its own process group, so that a hung run's ranks are killed with it.
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"the DDP run did not end within {BOUND_S}s (a hang):\n{stdout}{stderr}")
    elapsed = time.monotonic() - began
    print(f"torchrun DDP run: {elapsed:.1f}s")
    assert proc.returncode == 0, stdout + stderr

    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert reports[0]["params"] == reports[1]["params"]  # exactly, not approximately
    trained = Counter(tuple(t) for report in reports for t in report["trained"])
    expected = {
        (epoch, shard, batch)
        for epoch in range(EPOCHS)
        for shard in range(SHARDS)
        for batch in range(1 + shard % 3)
    }
    assert set(trained) == expected
    assert max(trained.values()) == 1  # every batch of every shard trained exactly once
    for epoch in range(EPOCHS):
        steps = [sum(1 for t in r["trained"] if t[0] == epoch) for r in reports]
        assert steps[0] != steps[1]  # uneven, always: the join is what ended the epoch
        assert min(steps) > 0
    assert "final parameters identical on every rank: True" in stdout
    status = read_status(from_url(url))
    assert status.complete
    names = [row["learner"] for row in status.learners]
    assert names == ["rank0", "rank0-w0", "rank1", "rank1-w0"]
