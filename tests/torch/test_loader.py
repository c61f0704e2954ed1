"""``SharedQueueLoader``: a unit is recorded done only once the loop took its last item.

torch drops the batches still in its worker queues when a loop leaves early. Each test
checks what a user relies on: leaving an epoch early and finishing it later delivers every
item, every unit recorded done had all its items taken by the loop, and a plain DataLoader
with workers, which cannot give that promise, is refused. Two tests drive a worker's side
directly (its gate, its queue), for the cases a DataLoader's timing cannot pin down.
"""

from __future__ import annotations

import functools
import gc
import logging
import logging.handlers
import multiprocessing
import os
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402 - after the importorskip

from gradientmail import ConfigurationError, Mailbox, WorkerError  # noqa: E402
from gradientmail._forwarding import Forwarding  # noqa: E402
from gradientmail._torch_data.acks import AckBoard, WorkerGate  # noqa: E402
from gradientmail.patterns._run_layout import RunLayout  # noqa: E402
from gradientmail.patterns.shared_queue._open import open_queue  # noqa: E402
from gradientmail.patterns.shared_queue._options import queue_options  # noqa: E402
from gradientmail.status import read_status  # noqa: E402
from gradientmail.torch import SharedQueueDataset, SharedQueueLoader  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402

SHARDS = {f"s{i:02d}": i for i in range(12)}
ITEMS = 4
EVERY_ITEM = {unit * 10 + k for unit in SHARDS.values() for k in range(ITEMS)}


@pytest.fixture(autouse=True)
def collect_loaders() -> Iterator[None]:
    yield
    gc.collect()


def load(unit: int) -> Iterator[int]:
    for k in range(ITEMS):
        yield unit * 10 + k


def done_units(box: Mailbox) -> set[int]:
    prefix = RunLayout(0).done
    return {SHARDS[key[len(prefix) :]] for key in box.list(prefix)}


def assert_done_units_were_taken(box: Mailbox, taken: Counter[int]) -> None:
    """The promise: every unit recorded done had every one of its items taken by the loop."""
    for unit in done_units(box):
        missing = [unit * 10 + k for k in range(ITEMS) if taken[unit * 10 + k] == 0]
        assert not missing, f"unit {unit} is recorded done, but items {missing} never arrived"


def taken_from(batches: Any) -> Counter[int]:
    return Counter(int(x) for batch in batches for x in batch)


@pytest.mark.parametrize("persistent", [True, False])
def test_a_break_then_finishing_the_epoch_delivers_every_item(
    rig_file: Rig, persistent: bool
) -> None:
    """The newcomer's case: 12 shards x 4 items, batches of 2, two workers, a break after 5
    batches, then the same epoch again. Before, 46 of 48 items arrived while status said
    12 of 12 done: the units of batches torch dropped had been recorded done. Which batches
    torch holds at the break varies from run to run, so five runs."""
    for _ in range(5):
        box = rig_file.fresh()
        dataset = SharedQueueDataset(SHARDS, mailbox=box, load=load, learner_id="r")
        loader = SharedQueueLoader(
            dataset, batch_size=2, num_workers=2, persistent_workers=persistent
        )
        taken: Counter[int] = Counter()
        for n, batch in enumerate(loader):
            taken.update(int(x) for x in batch)
            if n == 4:
                break
        assert_done_units_were_taken(box, taken)
        assert not read_status(box).complete
        taken.update(taken_from(loader))  # the same epoch again: the released units come back
        assert set(taken) == EVERY_ITEM
        assert_done_units_were_taken(box, taken)
        status = read_status(box)
        assert status.complete  # once the loop ended, not later
        assert not status.failed  # leaving early is not a failure


def test_a_unit_is_done_only_once_the_loop_asked_past_its_last_batch(rig_file: Rig) -> None:
    """Batches of one whole unit, one worker: after the loop took n batches, at most n - 1
    units can be done, however far the worker has run ahead."""
    box = rig_file.fresh()
    dataset = SharedQueueDataset(SHARDS, mailbox=box, load=load, learner_id="r")
    loader = SharedQueueLoader(dataset, batch_size=ITEMS, num_workers=1)
    taken: Counter[int] = Counter()
    for n, batch in enumerate(loader, start=1):
        taken.update(int(x) for x in batch)
        assert len(done_units(box)) <= n - 1
        assert_done_units_were_taken(box, taken)
    assert read_status(box).complete


def test_drop_last_leaves_the_dropped_items_units_undone_and_says_so(rig_file: Rig) -> None:
    box = rig_file.fresh()
    units = {f"s{i:02d}": i for i in range(5)}  # 20 items, two workers, batches of 3
    dataset = SharedQueueDataset(units, mailbox=box, load=load, learner_id="r")
    loader = SharedQueueLoader(dataset, batch_size=3, num_workers=2, drop_last=True)
    taken = taken_from(loader)
    assert_done_units_were_taken(box, taken)
    status = read_status(box)
    assert not status.complete  # shown, not hidden: a unit's last items were dropped
    assert status.in_progress == 0  # released, not left held by a learner that has left
    assert status.done + (status.free or 0) == len(units)
    # The workers' sessions count as finished only the units recorded done: a unit whose
    # last items torch dropped was released, and is not the worker's finished work.
    finished = sum(int(r.get("units_finished") or 0) for r in status.learners)
    assert finished == status.done, [
        (r["learner"], r.get("units_finished")) for r in status.learners
    ]


def test_a_worker_queue_run_to_its_end_releases_the_unit_whose_items_the_loop_never_took(
    rig_file: Rig,
) -> None:
    """A worker's side, driven in this process as a DataLoader worker drives it: its queue
    hands every item over and runs to its end, but the loop takes only the batches of the
    first two units, then nothing more (torch dropped the last batch: ``drop_last``, or a
    ``break``). Closing the queue records those two done and releases the third: status
    shows it free, for any learner, not in progress under a worker that has gone."""
    box = rig_file.fresh()
    units = {f"s{i:02d}": i for i in range(3)}
    board = AckBoard(workers=1, slack=len(units))
    generation = board.begin()
    gate = WorkerGate(board, 0)
    # As SharedQueueDataset opens a worker's queue: built with the worker's gate, and
    # waiting for no other learner (prefetch 8, no order or shuffle, a 60 s lease, one
    # epoch).
    options = queue_options(units, load, 8, None, None, 60.0, False, None)
    with open_queue(
        options, mailbox=box, learner_id="r-w0", epoch=0, reporter=None, gate=gate
    ) as items:
        handed = []
        for item in items:
            gate.count += 1  # handed over to the DataLoader, as the worker counts
            handed.append(item)
        assert len(handed) == len(units) * ITEMS  # the queue ran to its end
        board.took(0, 2 * ITEMS, generation)  # the loop took the first two units' batches
        board.seal(generation)  # and will take nothing more
    status = read_status(box)
    assert (status.done, status.in_progress, status.free) == (2, 0, 1)
    assert done_units(box) == {handed[0] // 10, handed[ITEMS] // 10}


def test_a_workers_gate_opens_only_for_what_the_loop_took_in_the_gates_own_iteration() -> None:
    """The mechanism, driven directly: a worker's gate for a unit opens once the loop took
    the unit's last item in the same iteration; when the loop leaves and the next iteration
    begins first, the items it never took are lost, so the gate stays shut (the unit is
    released and trained again), even for a gate already waiting."""
    board = AckBoard(workers=1, slack=1)
    generation = board.begin()
    gate = WorkerGate(board, 0)  # as the worker builds it when its iteration starts
    gate.count = 2 * ITEMS  # the worker handed over two units' items
    board.took(0, ITEMS, generation)  # the loop asked past the batch ending the first unit
    assert gate.wait(ITEMS)
    verdicts: list[bool] = []
    waiting = threading.Thread(target=lambda: verdicts.append(gate.wait(2 * ITEMS)), daemon=True)
    waiting.start()  # the second unit's completion waits for the loop...
    board.begin()  # ...which left, its batches dropped, and began the next iteration
    waiting.join(timeout=30)
    assert verdicts == [False]
    assert WorkerGate(board, 0).generation == generation + 1  # the next iteration's gate


def test_a_plain_dataloader_with_workers_is_refused_naming_the_loader(rig_file: Rig) -> None:
    dataset = SharedQueueDataset(SHARDS, mailbox=rig_file.fresh(), load=load, learner_id="r")
    with pytest.raises(ConfigurationError, match=r"SharedQueueLoader\(dataset, \.\.\.\)"):
        list(DataLoader(dataset, batch_size=2, num_workers=2))
    # Without workers the loop itself takes each item: safe with either loader.
    assert taken_from(DataLoader(dataset, batch_size=2)).keys() == EVERY_ITEM


def test_bad_combinations_are_refused_when_the_loader_is_built(rig_file: Rig) -> None:
    box = rig_file.fresh()
    waiting = SharedQueueDataset(SHARDS, mailbox=box, load=load, wait_for_others=True)
    with pytest.raises(ConfigurationError, match=r"wait_for_others=True\) with DataLoader workers"):
        SharedQueueLoader(waiting, num_workers=2)
    SharedQueueLoader(waiting)  # without workers it is fine
    with pytest.raises(ConfigurationError, match=r"loads a gradientmail\.torch\.SharedQueue"):
        SharedQueueLoader(list(range(4)))  # type: ignore[arg-type]


def test_an_iteration_collected_in_a_cycle_still_shuts_its_workers_down(rig_file: Rig) -> None:
    """An iteration left early and then collected by the garbage collector, not by its
    reference count (here a cycle through it): the workers stop and the units come back.
    The collector clears weak references before it runs finalizers, so a shutdown reached
    through a weak reference was skipped: the workers stayed up, and a later iteration
    whose iterator reused the address failed in torch (``_set_worker_pids should be called
    only once``)."""
    box = rig_file.fresh()
    # A short lease: the collected iteration's gates were not given up, so the next one
    # waits for the old leases of its learner id, as a restart does.
    dataset = SharedQueueDataset(SHARDS, mailbox=box, load=load, learner_id="r", lease=3)
    loader = SharedQueueLoader(dataset, batch_size=2, num_workers=2)
    taking = iter(loader)
    taken = Counter(int(x) for x in next(taking))
    workers = list(taking._inner._workers)
    taking.cycle = taking  # type: ignore[attr-defined]  # only a collection frees it
    del taking
    gc.collect()
    for worker in workers:
        worker.join(timeout=30)
    assert not any(worker.is_alive() for worker in workers)
    taken.update(taken_from(loader))  # the same epoch again: the released units come back
    assert set(taken) == EVERY_ITEM
    assert read_status(box).complete


class _OwnPid(IterableDataset[int]):
    """Each worker yields its process id, once."""

    def __iter__(self) -> Iterator[int]:
        yield os.getpid()


def test_what_the_loader_relies_on_from_torch_persistent_workers_outlive_the_end() -> None:
    """SharedQueueLoader waits at the end of an iteration for its workers' last records, so
    it runs them under a DataLoader whose workers persist, and lets that loader go to stop
    them. This is torch's public behaviour it relies on, checked on the torch installed: at
    ``StopIteration`` persistent workers are still up, and they stop once the loader and
    its iterator are let go. Should torch change either, this fails."""
    loader: DataLoader[int] = DataLoader(
        _OwnPid(), batch_size=None, num_workers=2, persistent_workers=True
    )
    iterator = iter(loader)
    pids = {int(pid) for pid in iterator}  # runs to StopIteration
    assert len(pids) == 2
    children = {child.pid: child for child in multiprocessing.active_children()}
    assert pids <= children.keys(), "a persistent worker stopped at the end of an iteration"
    workers = [children[pid] for pid in pids]
    del iterator, loader
    for worker in workers:
        worker.join(timeout=30)
    assert not any(worker.is_alive() for worker in workers), "workers outlived their loader"


def _close_nothing_and_exit(board: AckBoard, generation: int) -> None:
    WorkerGate(board, 0)  # this process runs worker 0's iteration
    board.closing(0, generation)  # it began closing its queue, and dies before it closed


def test_the_end_of_an_iteration_does_not_wait_for_a_worker_that_died_before_its_last_records() -> (
    None
):
    """The loop waits at the end for each worker closing its queue, unless the worker's
    process is gone: then it says which worker died, instead of waiting forever."""
    board = AckBoard(workers=1, slack=1)
    generation = board.begin()
    child = multiprocessing.get_context("fork").Process(
        target=_close_nothing_and_exit, args=(board, generation)
    )
    child.start()
    child.join(timeout=30)
    failures: list[list[str]] = []
    settling = threading.Thread(
        target=lambda: failures.append(board.settle(generation, board.alive)), daemon=True
    )
    settling.start()
    settling.join(timeout=30)
    assert not settling.is_alive(), "the loop waits for a worker that died"
    ((failure,),) = failures
    assert "worker 0 died before it recorded the completions of its last units" in failure


class _ExitsAtItsEnd(Forwarding):
    """A worker's mailbox whose process exits, quietly (status 0), as its queue writes the
    lease that ends its iteration: after its last completions, before it says it closed."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner

    def put_if_match(self, key: str, data: Any, version: Any) -> Any:
        if key.startswith("leases/") and b'"state":"finished"' in bytes(data):
            os._exit(0)
        return self.inner.put_if_match(key, data, version)

    def put_if_absent(self, key: str, data: Any) -> bool:
        return self.inner.put_if_absent(key, data)

    def put(self, key: str, data: Any) -> None:
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_versioned(self, key: str) -> Any:
        return self.inner.get_versioned(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str = "", **kwargs: Any) -> Iterator[str]:
        return self.inner.list(prefix, **kwargs)  # type: ignore[call-arg]


def test_a_worker_that_dies_closing_its_iteration_fails_the_loop_instead_of_hanging(
    rig_file: Rig,
) -> None:
    """The loop's end waits for each worker to close its queue; a worker whose process
    ends first (here: quietly, so torch sees no failure) is reported by name, at once."""
    dataset = SharedQueueDataset(
        SHARDS, mailbox=_ExitsAtItsEnd(rig_file.fresh()), load=load, learner_id="r"
    )
    loader = SharedQueueLoader(dataset, batch_size=2, num_workers=1)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            taken_from(loader)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            raised.append(exc)

    looping = threading.Thread(target=run, daemon=True)
    looping.start()
    looping.join(timeout=60)
    assert not looping.is_alive(), "the loop waits for a worker that died"
    (error,) = raised
    assert isinstance(error, WorkerError), error
    assert "worker 0 died before it recorded the completions of its last units" in str(error)


@pytest.mark.parametrize("persistent", [True, False])
def test_an_iteration_run_to_its_end_stops_its_workers_unless_they_persist(
    rig_file: Rig, persistent: bool
) -> None:
    """Run to its end, an iteration's workers stop even while its iterator is still held,
    as torch's own do; with ``persistent_workers=True`` they stay for the next iteration."""
    dataset = SharedQueueDataset(SHARDS, mailbox=rig_file.fresh(), load=load, learner_id="r")
    loader = SharedQueueLoader(dataset, batch_size=2, num_workers=2, persistent_workers=persistent)
    before = {child.pid for child in multiprocessing.active_children()}
    taking = iter(loader)
    taken = Counter(int(x) for x in next(taking))
    workers = [c for c in multiprocessing.active_children() if c.pid not in before]
    assert len(workers) == 2
    taken.update(taken_from(taking))  # to its end; `taking` is still held
    assert set(taken) == EVERY_ITEM
    for worker in workers:
        worker.join(timeout=0 if persistent else 30)
    assert [worker.is_alive() for worker in workers] == [persistent] * 2
    dataset.set_epoch(1)
    assert set(taken_from(loader)) == EVERY_ITEM
    if persistent:
        assert all(worker.is_alive() for worker in workers), "the next epoch's workers are new"


def _forward_logs(queue: Any, worker: int) -> None:
    """A worker's ``worker_init_fn``: its records go to the test's process, this one first."""
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(queue)]
    root.setLevel(logging.INFO)
    logging.getLogger("tests.worker").info("worker %d forwards its records", worker)


class _Reemit(logging.Handler):
    """Hands a record forwarded from a worker to this process's logger of its name."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(record.name).handle(record)


def test_a_clean_epoch_with_two_workers_warns_of_no_sibling_worker(
    rig_file: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A rank's DataLoader workers are learners of their own; the first to run out of free
    units ends while its sibling still holds its last unit. That is no other learner's
    unfinished work: before, every clean epoch logged one WARNING per worker naming its
    sibling (``'r-w0' ends epoch 0 with no unit free while other learners hold unfinished
    units: r-w1 (1)``). The workers' records are forwarded to this process, so ``caplog``
    holds what they logged."""
    context = multiprocessing.get_context()
    records = context.Queue()
    listener = logging.handlers.QueueListener(records, _Reemit())
    box = rig_file.fresh()
    dataset = SharedQueueDataset(SHARDS, mailbox=box, load=load, learner_id="r")
    loader = SharedQueueLoader(
        dataset,
        batch_size=2,
        num_workers=2,
        worker_init_fn=functools.partial(_forward_logs, records),
        multiprocessing_context=context,
    )
    caplog.set_level(logging.INFO)
    listener.start()
    try:
        for epoch in range(3):  # three clean epochs
            dataset.set_epoch(epoch)
            assert set(taken_from(loader)) == EVERY_ITEM
            assert read_status(box).complete
    finally:
        listener.stop()  # takes every record sent before it
    started = [r for r in caplog.records if r.name == "tests.worker"]
    assert len(started) == 6, "the workers' records did not all reach the test"
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warned, warned
