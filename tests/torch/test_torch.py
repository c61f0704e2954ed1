"""``gradientmail.torch.SharedQueueDataset`` under torch's DataLoader: workers, epochs, errors.

Every test checks what a training loop relies on: each unit's items arrive exactly once per
epoch across all workers, ``set_epoch`` gives a full next epoch, and nothing is duplicated
silently.
"""

from __future__ import annotations

import copy
import gc
import pickle
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402 - after the importorskip above

from gradientmail import ConfigurationError, Mailbox, Session, WorkerError  # noqa: E402
from gradientmail.patterns._leases import Lease  # noqa: E402
from gradientmail.patterns._run_layout import RunLayout  # noqa: E402
from gradientmail.patterns.shared_queue._unit_claims import UnitClaims  # noqa: E402
from gradientmail.status import read_status  # noqa: E402
from gradientmail.torch import SharedQueueDataset, SharedQueueLoader  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402

UNITS = {f"u{i:02d}": i for i in range(12)}
ITEMS = 3
EVERY_ITEM = Counter((unit, k) for unit in UNITS.values() for k in range(ITEMS))


@pytest.fixture(autouse=True)
def prompt_worker_shutdown(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Collect each test's DataLoader iterators before it ends, without torch's 5 s waits.

    After a worker raised, torch 2.13 waits ``MP_STATUS_CHECK_INTERVAL`` (5 s) per worker
    before terminating it; a shorter interval keeps the suite fast. It is torch's own
    behaviour (a bare ``IterableDataset`` that raises shows it too), not gradientmail's.
    """
    from torch.utils.data import _utils

    monkeypatch.setattr(_utils, "MP_STATUS_CHECK_INTERVAL", 0.5)
    yield
    gc.collect()


def load(unit: int) -> Iterator[tuple[int, int]]:
    """Three items per unit, named by (unit, index)."""
    for k in range(ITEMS):
        yield unit, k


def load_tensors(unit: int) -> Iterator[torch.Tensor]:
    for k in range(ITEMS):
        yield torch.tensor([unit, k])


def fail_in_u03(unit: int) -> Iterator[tuple[int, int]]:
    yield unit, 0
    if unit == 3:
        raise ValueError("corrupt shard")
    yield unit, 1


def epoch_items(loader: DataLoader[Any]) -> Counter[tuple[int, int]]:
    return Counter((int(unit), int(k)) for unit, k in loader)


def loader_for(dataset: SharedQueueDataset[Any], workers: int, **options: Any) -> DataLoader[Any]:
    if workers:
        options.setdefault("persistent_workers", True)
    return SharedQueueLoader(dataset, batch_size=None, num_workers=workers, **options)


@pytest.mark.parametrize("workers", [0, 2, 4])
@pytest.mark.parametrize("rig_name", ["rig_file", "rig_gcs"])
def test_every_unit_once_per_epoch_and_set_epoch_gives_a_full_next_epoch(
    request: pytest.FixtureRequest, rig_name: str, workers: int
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load, learner_id="rank0", shuffle=7)
    loader = loader_for(dataset, workers, pin_memory=True)
    assert epoch_items(loader) == EVERY_ITEM
    status = read_status(box)
    names = [row["learner"] for row in status.learners]
    expected = ["rank0"] if workers == 0 else [f"rank0-w{w}" for w in range(workers)]
    assert names == expected  # each worker is a learner, listed under its rank
    assert sum(row["units_finished"] for row in status.learners) == len(UNITS)
    assert status.complete

    dataset.set_epoch(1)
    assert epoch_items(loader) == EVERY_ITEM  # persistent workers see the new epoch
    assert read_status(box, epoch=1).complete
    # Without set_epoch the same epoch runs again: it is done, so it yields nothing.
    assert epoch_items(loader) == Counter()


def test_workers_of_two_ranks_share_one_epoch(rig_file: Rig) -> None:
    box = rig_file.fresh()
    ranks = [
        SharedQueueDataset(UNITS, mailbox=box, load=load, learner_id=f"rank{r}") for r in (0, 1)
    ]
    loaders = [iter(loader_for(dataset, 2)) for dataset in ranks]
    seen: Counter[tuple[int, int]] = Counter()
    while loaders:  # interleave the two ranks' loops, batch by batch
        for it in list(loaders):
            try:
                unit, k = next(it)
                seen[(int(unit), int(k))] += 1
            except StopIteration:
                loaders.remove(it)
    assert seen == EVERY_ITEM
    names = [row["learner"] for row in read_status(box).learners]
    assert names == ["rank0-w0", "rank0-w1", "rank1-w0", "rank1-w1"]


def test_batches_are_collated_and_pinned(rig_file: Rig) -> None:
    dataset = SharedQueueDataset(UNITS, mailbox=rig_file.fresh(), load=load_tensors)
    loader = SharedQueueLoader(dataset, batch_size=4, num_workers=2, pin_memory=True)
    rows = [tuple(row.tolist()) for batch in loader for row in batch]
    assert Counter(rows) == EVERY_ITEM


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("loader_type", [DataLoader, SharedQueueLoader])
def test_a_mailbox_in_one_process_only_is_refused_with_workers(
    rig_memory: Rig, workers: int, loader_type: type[DataLoader[Any]]
) -> None:
    dataset = SharedQueueDataset(UNITS, mailbox=rig_memory.fresh(), load=load, learner_id="r")
    with pytest.raises(ConfigurationError, match="not shared across processes"):
        list(loader_type(dataset, batch_size=None, num_workers=workers))
    # Alone in one process it is fine.
    assert epoch_items(DataLoader(dataset, batch_size=None)) == EVERY_ITEM


def test_a_memory_mailbox_is_refused_in_the_one_worker_of_a_loader_naming_the_fix(
    rig_memory: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the dataset starts its learner: in a DataLoader worker, even the only one
    (torch's ``get_worker_info`` says worker 0 of 1), a ``memory://`` mailbox would be the
    worker's own copy, so the worker and the training process would each deliver every
    unit. It is refused there, before any claim, and the message says what to do."""
    import gradientmail._torch_data.dataset as dataset_module

    box = rig_memory.fresh()
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load, learner_id="r")
    one_worker = SimpleNamespace(id=0, num_workers=1)
    monkeypatch.setattr(dataset_module, "get_worker_info", lambda: one_worker)
    with pytest.raises(ConfigurationError) as refused:
        iter(dataset)
    message = str(refused.value)
    assert "num_workers=1" in message
    assert "not shared across processes" in message
    assert "num_workers=0" in message  # the fix, with a shared store the other one
    assert list(box.list("")) == []  # nothing claimed, nothing registered


def test_a_mailbox_in_one_process_only_is_refused_in_a_distributed_job(
    rig_memory: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it
    dataset = SharedQueueDataset(UNITS, mailbox=rig_memory.fresh(), load=load, learner_id="r")
    with pytest.raises(ConfigurationError, match=r"torch\.distributed job of 2 processes"):
        iter(dataset)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_error_in_a_worker_names_the_unit_and_the_worker(rig_file: Rig, workers: int) -> None:
    dataset = SharedQueueDataset(UNITS, mailbox=rig_file.fresh(), load=fail_in_u03, learner_id="r")
    with pytest.raises(WorkerError) as caught:
        for _ in loader_for(dataset, workers, persistent_workers=False):
            pass
    message = str(caught.value)
    assert "'u03'" in message
    assert "corrupt shard" in message
    if workers:
        assert "learner 'r-w" in message
        assert "DataLoader worker process" in message
    else:
        assert "learner 'r'" in message


def test_leaving_early_releases_the_units_and_the_epoch_can_be_finished(rig_file: Rig) -> None:
    box = rig_file.fresh()
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load, learner_id="r")
    loader = loader_for(dataset, 2, persistent_workers=False)
    for _ in loader:
        break  # e.g. max_steps reached
    rest = epoch_items(loader)  # the same epoch again: the released units are taken
    assert set(rest) <= set(EVERY_ITEM)
    assert all(count == 1 for count in rest.values())
    status = read_status(box)
    assert status.complete
    assert not status.failed  # leaving early is not a failure


def test_spawned_workers_see_set_epoch(rig_file: Rig) -> None:
    dataset = SharedQueueDataset(UNITS, mailbox=rig_file.fresh(), load=load, learner_id="s")
    loader = SharedQueueLoader(
        dataset,
        batch_size=None,
        num_workers=1,
        persistent_workers=True,
        multiprocessing_context="spawn",
    )
    assert epoch_items(loader) == EVERY_ITEM
    dataset.set_epoch(1)
    assert epoch_items(loader) == EVERY_ITEM


def test_a_session_of_the_rank_is_used_without_workers(rig_file: Rig) -> None:
    box: Mailbox = rig_file.fresh()
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load, learner_id="rank0")
    with Session(box, "rank0", publish_every=60) as session:
        for _ in session.timed(DataLoader(dataset, batch_size=None)):
            session.step(samples=1)
    assert session.units_finished == len(UNITS)
    assert session.steps == sum(EVERY_ITEM.values())  # counted once, by the loop
    assert [row["learner"] for row in read_status(box).learners] == ["rank0"]


def ghost_holding_u00(box: Mailbox) -> None:
    """A learner that claimed unit u00 and died (its lease is never renewed)."""
    ghost = Lease(box, "leases/ghost", "ghost", duration=0.3)
    ghost.acquire()
    UnitClaims(box, RunLayout(0), "ghost", ghost.incarnation).claim("u00")


def test_a_dead_learners_unit_waits_for_its_restart_unless_told_to_wait(rig_file: Rig) -> None:
    box = rig_file.fresh()
    ghost_holding_u00(box)
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load, learner_id="r", lease=0.3)
    got = epoch_items(DataLoader(dataset, batch_size=None))
    assert got == Counter({item: 1 for item in EVERY_ITEM if item[0] != 0})
    status = read_status(box)
    assert (status.done, status.in_progress) == (len(UNITS) - 1, 1)  # shown, not hidden
    waiting = SharedQueueDataset(
        UNITS, mailbox=box, load=load, learner_id="s", lease=0.3, wait_for_others=True
    )
    assert epoch_items(DataLoader(waiting, batch_size=None)) == Counter(
        {(0, 0): 1, (0, 1): 1, (0, 2): 1}
    )
    assert read_status(box).complete


def test_arguments_are_checked_in_the_training_process(rig_file: Rig) -> None:
    box = rig_file.fresh()
    with pytest.raises(ConfigurationError, match="mapping"):
        SharedQueueDataset([1, 2], mailbox=box, load=load)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="order"):
        SharedQueueDataset(UNITS, mailbox=box, load=load, order=["nope"])
    with pytest.raises(ConfigurationError, match="prefetch"):
        SharedQueueDataset(UNITS, mailbox=box, load=load, prefetch=0)
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load)
    with pytest.raises(ConfigurationError, match="epoch"):
        dataset.set_epoch(-1)


def test_copies_keep_the_epoch(rig_file: Rig) -> None:
    dataset = SharedQueueDataset(UNITS, mailbox=rig_file.fresh(), load=load, learner_id="c")
    dataset.set_epoch(3)
    for other in (copy.deepcopy(dataset), pickle.loads(pickle.dumps(dataset))):
        assert other.epoch == 3
        other.set_epoch(4)  # a copy has its own epoch
    assert dataset.epoch == 3


def test_iterating_a_complete_epoch_again_without_set_epoch_warns(rig_file: Rig) -> None:
    import warnings

    dataset = SharedQueueDataset(UNITS, mailbox=rig_file.fresh(), load=load, learner_id="r0")
    loader = loader_for(dataset, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the first pass of an epoch is quiet
        assert epoch_items(loader) == EVERY_ITEM
    with pytest.warns(RuntimeWarning, match=r"epoch 0 at .* was already complete.*set_epoch"):
        assert epoch_items(loader) == Counter()
    dataset.set_epoch(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert epoch_items(loader) == EVERY_ITEM


@pytest.mark.parametrize("workers", [0, 2])
def test_epochs_flow_in_one_iteration_of_the_loader_each_unit_once_per_epoch(
    rig_file: Rig, workers: int
) -> None:
    """``epochs=range(3)``: one ``for batch in loader`` runs the three epochs; every unit
    is done once in each, and a second iteration, with nothing left, warns."""
    box = rig_file.fresh()
    dataset = SharedQueueDataset(UNITS, mailbox=box, load=load, epochs=range(3), shuffle=7)
    loader = loader_for(dataset, workers)
    items = epoch_items(loader)
    assert items == Counter(dict.fromkeys(EVERY_ITEM, 3))
    for epoch in range(3):
        assert read_status(box, epoch=epoch).complete, epoch
    with pytest.warns(RuntimeWarning, match="already complete"):
        assert epoch_items(loader_for(dataset, 0)) == Counter()
    with pytest.warns(RuntimeWarning, match="no effect"):
        dataset.set_epoch(4)


def test_bad_epochs_are_refused_in_the_training_process(rig_file: Rig) -> None:
    with pytest.raises(ConfigurationError, match="increase"):
        SharedQueueDataset(UNITS, mailbox=rig_file.fresh(), load=load, epochs=[1, 0])
