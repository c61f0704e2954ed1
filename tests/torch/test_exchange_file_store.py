"""The exchange on ``file://``: a learner stopped in a delete stalls no one; folders stay few.

A ``file://`` delete takes no lock, so a learner stopped (SIGSTOP) inside one, for
instance while collecting a version that left the history, holds up no other learner's
exchanges. And a delete removes the folders its key leaves empty, so a run that wrote
40,000 versions holds the folders of the versions kept and in flight, not one per version
ever written (which every sweep's listing would walk).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail.backends.local import FileMailbox  # noqa: E402 - after the importorskip
from gradientmail.torch import load_shared  # noqa: E402
from tests.support.exchange_versions import shared_store, write_versions_in_threads  # noqa: E402
from tests.support.exchange_workers import exact_exchange, flat, integer_model  # noqa: E402
from tests.support.pause_points import learner_stopping_in_a_delete  # noqa: E402
from tests.support.pausing import stopped  # noqa: E402
from tests.support.polling import wait_until  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402
from tests.support.stress import size  # noqa: E402

CTX = mp.get_context("spawn")
#: Exchanges the running learner must make while the other is stopped: each deletes the 16
#: fragments of a version, so a stopped learner holding one of the 256 lock stripes, as a
#: locked delete did, would be met within them all but once in 200,000 runs.
EXCHANGES = 200


def _exchanges_made(model: Any, exchange: Any, target: int, deadline: float) -> bool:
    """Step ``model`` until ``exchange`` made ``target`` exchanges; ``False`` at the deadline."""
    while exchange.stats.exchanges < target:
        if time.monotonic() > deadline:
            return False
        with torch.no_grad():
            for p in model.parameters():
                p -= 1
        exchange.step()
        time.sleep(0.001)  # pacing: the exchange thread gets the core, not synchronisation
    return True


def test_a_learner_stopped_inside_a_delete_holds_up_no_other_learners_exchanges(
    rig_file: Rig, tmp_path: Path
) -> None:
    box = rig_file.fresh()
    out = str(tmp_path / "stopped")
    stopping = CTX.Process(target=learner_stopping_in_a_delete, args=(box, "stopping", 40, out))
    stopping.start()
    try:
        wait_until(lambda: stopped(stopping.pid or 0), 120, "the learner to stop in a delete")
        model = integer_model()
        with exact_exchange(model, box, "running", every=1, fragment_bytes=4) as exchange:
            try:
                target = exchange.stats.exchanges + EXCHANGES
                made = _exchanges_made(model, exchange, target, time.monotonic() + 120)
            finally:
                os.kill(stopping.pid or 0, signal.SIGCONT)  # a stuck exchange thread can end
            steps = exchange.stats.steps
    finally:
        os.kill(stopping.pid or 0, signal.SIGCONT)
        stopping.join(120)
    assert made, f"fewer than {EXCHANGES} exchanges while the other learner was stopped"
    assert stopping.exitcode == 0
    shared = integer_model()
    load_shared(shared, box)
    total = json.loads(Path(out).read_text())["total"] - steps
    assert torch.equal(flat(shared), flat(integer_model()) + total), "a delta was lost or doubled"


# -- folders ----------------------------------------------------------------------------------


#: A leak of one folder a version would show after a few versions; CI writes 5,000 (about
#: 15 s) and make stress the 40,000 at which the leak was found (158 MiB of folders).
VERSIONS = size(ci=5_000, full=40_000)
WRITERS = 3
KEEP = 3


def _folders(root: Path) -> int:
    return sum(len(folders) for _, folders, _ in os.walk(root))


@pytest.mark.slow
def test_thousands_of_versions_leave_only_the_folders_of_the_versions_kept(
    rig_file: Rig,
) -> None:
    box = rig_file.open(rig_file.url() + "?fsync=false")
    assert isinstance(box, FileMailbox)
    store = shared_store(box, KEEP)  # 2 fragments a version
    write_versions_in_threads(store, VERSIONS, WRITERS)
    root = Path(box.root)
    head = store.read_head()
    assert head is not None
    assert head[0].version >= VERSIONS
    # exchange.d, model.d, data.d, .tmp and .locks, then a folder per version kept, and at
    # most one per writer in flight (none once the writers ended: a lost version is deleted
    # when its swap loses).
    assert _folders(root) <= 5 + KEEP + WRITERS
