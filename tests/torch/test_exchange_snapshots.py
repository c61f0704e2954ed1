"""The snapshots a step hands over: copied into memory no one reads any more.

A large model's fresh memory costs the training loop more than the copy itself (on a CPU, a
64 MiB snapshot took 25 ms into fresh memory, 3 ms into memory already mapped), so each
snapshot in host memory reuses the memory of the snapshot before last: its exchange, and any
fresher read handed back for it, ended before the last one's outcome could be adopted. The
exact integer model shows that nothing is lost or applied twice meanwhile.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import WorkerError, from_url  # noqa: E402 - after the importorskip
from gradientmail._exchange import handoff as handoff_module  # noqa: E402
from gradientmail._exchange import learner as learner_module  # noqa: E402
from gradientmail._exchange.tensors import State, kept_for_reuse  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    initial,
    integer_model,
    shared_now,
    subtract,
)
from tests.support.polling import returns_within, wait_until  # noqa: E402


def test_each_snapshot_reuses_the_memory_of_the_snapshot_before_last() -> None:
    box = from_url("memory://exchange-snapshots")
    model = integer_model()
    pointers = []
    with exact_exchange(model, box, "a", every=1) as exchange:
        for _ in range(6):
            subtract(model, 1)
            exchange.step()  # adopts the last outcome, hands over a new snapshot
            assert exchange._snapshot is not None, "every step hands one over here"
            pointers.append(exchange._snapshot.values.data_ptr())
            wait_until(exchange._handoff.settled, 60, "the exchange and its fresher read")
    assert pointers[0] != pointers[1], "the last snapshot may still be read: never reused"
    assert pointers[2:] == [pointers[0], pointers[1]] * 2
    assert torch.equal(shared_now(box), initial() - 6)


def test_two_learners_exchanging_in_turn_stay_exact_while_snapshots_are_reused() -> None:
    """Each adoption lands on a version the other moved: the reused snapshot memory
    must hold this step's values, not those of two exchanges ago."""
    box = from_url("memory://exchange-snapshots-two")
    models = [integer_model(), integer_model()]
    with (
        exact_exchange(models[0], box, "a", every=1) as a,
        exact_exchange(models[1], box, "b", every=1) as b,
    ):
        for step in range(8):
            for size, model, exchange in ((1, models[0], a), (2, models[1], b)):
                subtract(model, size)
                exchange.step()
                wait_until(exchange._handoff.settled, 60, f"step {step}'s exchange")
    assert torch.equal(shared_now(box), initial() - 8 * 3)


def test_only_snapshots_in_host_memory_are_kept_for_reuse() -> None:
    """On a GPU the caching allocator reuses memory already: a spare kept there would hold
    a model's size of GPU memory for nothing (``meta`` stands in for a device here)."""
    assert kept_for_reuse(torch.zeros(4))
    assert not kept_for_reuse(torch.empty(4, device="meta"))


def test_a_fresher_read_still_in_flight_reads_its_snapshot_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the reuse must not lose: the loop adopts outcome 1 and hands over snapshot 2
    while the fresher read for outcome 1 is still on its way (held here), and that read
    then computes its correction from snapshot 1. Snapshot 2 must not be in its memory."""
    box = from_url("memory://exchange-snapshots-refresh")
    handed: dict[int, tuple[State, Any]] = {}  # each snapshot, and its values when handed
    changed: list[int] = []
    real_corrected = handoff_module.corrected

    def checking(shared: State, snapshot: State) -> State:
        kept = handed.get(id(snapshot))
        if kept is not None and kept[0] is snapshot and not torch.equal(snapshot.values, kept[1]):
            changed.append(id(snapshot))
        return real_corrected(shared, snapshot)

    monkeypatch.setattr(handoff_module, "corrected", checking)
    a_model, b_model = integer_model(), integer_model()
    with (
        exact_exchange(a_model, box, "a", every=1) as a,
        exact_exchange(b_model, box, "b", every=1) as b,
    ):
        reading, release = threading.Event(), threading.Event()
        real_refresh = a._handoff.applier.refresh

        def held(version: int) -> Any:
            reading.set()
            release.wait(60)
            return real_refresh(version)

        monkeypatch.setattr(a._handoff.applier, "refresh", held)

        def step(exchange: Any, model: Any) -> None:
            subtract(model, 1)
            exchange.step()
            if exchange._snapshot is not None:
                snapshot = exchange._snapshot
                handed[id(snapshot)] = (snapshot, snapshot.values.clone())

        step(a, a_model)  # snapshot 1; its outcome is published, then its fresher read
        assert reading.wait(60), "the fresher read for outcome 1 began"
        step(b, b_model)  # a newer version for that read to find
        wait_until(b._handoff.settled, 60, "b's exchange")
        step(a, a_model)  # adopts outcome 1, hands over snapshot 2: read 1 is in flight
        release.set()
        for _ in range(4):
            wait_until(a._handoff.settled, 60, "a's exchange and fresher read")
            step(a, a_model)
        wait_until(a._handoff.settled, 60, "a's last exchange")
    assert len(handed) >= 4
    assert changed == [], "a snapshot was overwritten while its fresher read used it"
    assert torch.equal(shared_now(box), initial() - 7)


def test_a_fresher_read_that_fails_reaches_the_loop_instead_of_hanging_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not a store error (those are ridden out): a bug or an out-of-memory in the read. The
    thread ends with it, and the loop raises it; leaving never waits for an outcome that
    no thread will make."""
    model = integer_model()
    exchange = exact_exchange(model, from_url("memory://exchange-refresh-fails"), "a", every=1)

    def fails(version: int) -> Any:
        raise MemoryError("no room for the fresher version")

    def train_and_leave() -> None:
        with exchange:
            monkeypatch.setattr(exchange._handoff.applier, "refresh", fails)
            subtract(model, 1)
            exchange.step()  # its exchange is applied, then the fresher read fails
            thread = exchange._handoff._thread
            assert thread is not None
            wait_until(lambda: not thread.is_alive(), 60, "the exchange thread's end")
            subtract(model, 1)
            exchange.step()

    with pytest.raises(WorkerError, match="no room for the fresher version"):
        returns_within(train_and_leave, 60, "training and leaving after the read failed")


def test_host_snapshots_are_let_go_once_the_model_is_on_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model moved to a GPU mid-run: its snapshots are no longer kept, and neither are
    the two host copies kept before (``kept_for_reuse`` answers as for a GPU tensor)."""
    model = integer_model()
    with exact_exchange(model, from_url("memory://exchange-snapshots-gpu"), "a", every=1) as a:
        for _ in range(3):
            subtract(model, 1)
            a.step()
            wait_until(a._handoff.settled, 60, "a's exchange")
        assert len(a._recent) == 2
        monkeypatch.setattr(learner_module, "kept_for_reuse", lambda values: False)
        subtract(model, 1)
        a.step()
        assert len(a._recent) == 0
