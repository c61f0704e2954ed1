"""Keys a run did not write, inside the keys it owns: an error naming the key, never a hang.

A claim key holding bytes no learner wrote (the README's own ``box.put_if_absent(
"units/0007", b"node-a")``, say) once made every learner skip the unit and wait for it
forever, with nothing logged.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail._errors import ForeignRecordError, WorkerError
from gradientmail.patterns.shared_queue import shared_queue

UNITS = {f"{i:04d}": i for i in range(10)}


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the mechanism is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


def _run_queue(box: Mailbox, **options: Any) -> tuple[list[Any], BaseException | None]:
    """Consume a queue in a thread; return what it delivered and what it raised."""
    got: list[Any] = []
    raised: list[BaseException] = []

    def consume() -> None:
        try:
            with shared_queue(
                UNITS, mailbox=box, learner_id="a", load=lambda u: [u], **options
            ) as queue:
                got.extend(queue)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            raised.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(timeout=60)  # a hang detector only: the queue must end on its own
    assert not thread.is_alive(), f"the queue hung after delivering {sorted(got)}"
    return got, raised[0] if raised else None


@pytest.mark.parametrize("wait_for_others", [True, False])
def test_a_foreign_claim_key_raises_an_error_naming_it(box: Mailbox, wait_for_others: bool) -> None:
    assert box.put_if_absent("units/0007", b"node-a")
    got, raised = _run_queue(box, wait_for_others=wait_for_others)
    # Raised by the loader thread, so it arrives as a WorkerError that carries it.
    assert isinstance(raised, WorkerError), raised
    cause = raised.__cause__
    assert isinstance(cause, ForeignRecordError), cause
    assert cause.key == "units/0007"
    assert raised.error_type.endswith("ForeignRecordError")
    message = str(raised)
    assert "'units/0007'" in message
    assert "box.delete('units/0007')" in message
    assert "prefix of its own" in message
    assert 7 not in got
    # Nothing was hidden: the foreign key is untouched, and no unit was recorded done twice.
    assert box.get("units/0007") == b"node-a"
    assert len(list(box.list("done/"))) == len(got) == len(set(got))


def test_after_the_foreign_key_is_removed_the_run_completes(box: Mailbox) -> None:
    box.put_if_absent("units/0007", b"node-a")
    first, raised = _run_queue(box)
    assert isinstance(raised, WorkerError)
    assert isinstance(raised.__cause__, ForeignRecordError)
    box.delete("units/0007")
    rest, raised = _run_queue(box)
    assert raised is None, raised
    assert sorted(first + rest) == sorted(UNITS.values())


def test_the_error_survives_pickling_and_a_rebuild_from_its_message() -> None:
    import pickle

    error = ForeignRecordError("key 'units/x' holds bytes ...", key="units/x")
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again), again.key) == (ForeignRecordError, str(error), "units/x")
    rebuilt = ForeignRecordError(str(error))  # as torch's DataLoader rebuilds a worker's error
    assert rebuilt.key == ""
