"""The snapshots a step hands over: copied into memory no one reads any more.

A large model's fresh memory costs the training loop more than the copy itself (on a CPU, a
64 MiB snapshot took 25 ms into fresh memory, 3 ms into memory already mapped), so each
snapshot in host memory reuses the memory of the snapshot before last: its exchange, and any
fresher read handed back for it, ended before the last one's outcome could be adopted. The
exact integer model shows that nothing is lost or applied twice meanwhile.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gradientmail import from_url  # noqa: E402 - after the importorskip
from gradientmail._exchange.tensors import kept_for_reuse  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    initial,
    integer_model,
    shared_now,
)
from tests.support.polling import wait_until  # noqa: E402


def test_each_snapshot_reuses_the_memory_of_the_snapshot_before_last() -> None:
    box = from_url("memory://exchange-snapshots")
    model = integer_model()
    pointers = []
    with exact_exchange(model, box, "a", every=1) as exchange:
        for _ in range(6):
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1
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
                with torch.no_grad():
                    for p in model.parameters():
                        p -= size
                exchange.step()
                wait_until(exchange._handoff.settled, 60, f"step {step}'s exchange")
    assert torch.equal(shared_now(box), initial() - 8 * 3)


def test_only_snapshots_in_host_memory_are_kept_for_reuse() -> None:
    """On a GPU the caching allocator reuses memory already: a spare kept there would hold
    a model's size of GPU memory for nothing (``meta`` stands in for a device here)."""
    assert kept_for_reuse(torch.zeros(4))
    assert not kept_for_reuse(torch.empty(4, device="meta"))
