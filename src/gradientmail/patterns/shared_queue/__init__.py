"""``shared_queue``: learners of unequal speed share one fixed set of units, each done once.

Every learner runs the same loop over the same ``units`` mapping::

    from gradientmail.patterns.shared_queue import shared_queue

    with shared_queue(units, mailbox=box, learner_id="node-0", load=load_unit) as batches:
        for item in batches:      # whatever load(unit) yields, in order
            train(item)

A learner owns a unit once it has created ``units/{identifier}`` with ``put_if_absent``; so
a fast learner simply claims more units, and no learner needs to know another's speed.

Guarantees
    * **Each unit is completed exactly once.** A unit is *done* when the consumer has taken
      its last item and asks for the next one. The learner then records the completion:
      its claim moves to ``done`` by compare-and-swap and ``done/{identifier}`` is created.
      Resume and ``gradientmail status`` trust these records, not claims.
    * **Claims are checked.** After creating a claim the learner reads it back; if another
      claim is stored the store is not atomic, and the queue raises
      :class:`~gradientmail.AtomicityViolationError` (carried as below).
    * **Dead learners' units are finished by others.** Every learner holds one lease,
      renewed every ``lease / 3`` seconds. A learner that finds no free unit does not leave
      while units are claimed but not done: it watches the leases of learners still at
      work, and once one was unchanged for ``lease`` seconds by its own clock, takes that
      learner's units over with ``put_if_match`` (exactly one taker) and loads them from
      their first item.
    * **Leaving when nothing is free.** With ``wait_for_others=False`` a learner that finds
      no free or released unit ends its iteration instead of waiting for units others hold.
      Lockstep training (DDP) and DataLoader workers need this: a rank waiting for data
      while another waits for it in a collective would deadlock. A dead learner's units
      are then finished when it is restarted (resume), not by the others.
    * **A paused learner stops.** A learner whose lease may have lapsed (SIGSTOP, a long
      pause, a partition) delivers nothing more until it has renewed, and one that was taken
      over raises :class:`~gradientmail.LeaseLostError`: it delivers no item of a
      unit it no longer owns and never records a completion for one.
    * **Items are delivered twice only** for a unit whose owner died, was fenced or left.
    * **Resume.** The same job on the same prefix continues: done units are skipped; a
      learner restarting with its old ``learner_id`` takes back its own unfinished units
      first (its previous incarnation is fenced by the new lease), then free units, then
      dead learners' units. A run whose units are all done yields nothing
      (``queue.stats.run_complete``). A different unit mapping on the same prefix raises
      ``ConfigurationError`` naming the first difference; runs are never mixed.
    * **Early exit.** Leaving the ``with`` block early (``break``, an exception, Ctrl-C)
      releases the learner's unfinished units at once, prefetched ones included, so others
      take them without waiting for a lease to expire.
    * **Epochs.** ``epoch=k`` scopes claims and completions to epoch ``k`` of the same run
      (same URL); ``shuffle=seed`` gives each epoch its own preference order, identical on
      every learner. ``epochs=range(n)`` runs the epochs in one iteration, and they *flow*:
      a learner that finds no unit of epoch k free, while units of k are in progress
      elsewhere, goes on to claim units of k+1 at once. It stays responsible for k: it
      keeps watching k's learners, takes over a dead one's units of k, and delivers items
      of k before those of k+1. Each unit is still done exactly once per epoch; a unit of
      k+1 may start before the last of k has ended; a learner never runs more than one
      epoch ahead of the oldest epoch with a unit in progress. With
      ``wait_for_others=False`` it leaves each epoch as soon as none of its units is free
      (the others finish theirs), so it goes on as far as units are free. While two epochs
      are open each has its own ``prefetch`` buffer.
    * **Prefetch bound.** A background thread claims units and runs ``load(unit)``. It pulls
      an item only when fewer than ``prefetch`` items are buffered, and claims the next unit
      only then too.
    * **Errors.** An exception from ``load`` or from the mailbox reaches the consumer
      *after* every item buffered before it, as a :class:`~gradientmail.WorkerError`
      with the original as ``__cause__``. Errors are never swallowed.
    * **Exit.** Leaving the ``with`` block stops the thread within its current ``load`` step
      or mailbox call, closes the unit's iterator, records pending completions, and has
      ended every background thread when ``__exit__`` returns.

Without compare-and-swap there are no takeovers: claims are permanent, a dead learner's
units stay unfinished (``gradientmail status`` says so), and an early exit deletes claims.

Cost: per unit, a claim and its read-back, a swap and a record to complete, and a few lost
claims (``docs/shared-queue.md`` has the figures); per learner, a lease write per
``lease / 3`` seconds, listings at the start and at the end, and two pages per poll while
waiting.

Progress: the queue reports each unit's claim, start, finish and release, and the consumer's
wait for data, to a :class:`~gradientmail.session.Session` (``session=``, or the innermost
``Session`` with the same ``learner_id`` entered in this thread).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from gradientmail._keys import validate_segment
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._progress import (
    ProgressReporter,
    active_reporter,
    any_active_reporter,
    check_reporter,
)
from gradientmail.patterns._run_layout import MANIFEST_KEY, UNITS_PREFIX
from gradientmail.patterns.shared_queue._consumer import SharedQueue
from gradientmail.patterns.shared_queue._open import open_queue
from gradientmail.patterns.shared_queue._options import DEFAULT_LEASE, queue_options
from gradientmail.patterns.shared_queue._stats import QueueCost, QueueStats

__all__ = [
    "DEFAULT_LEASE",
    "MANIFEST_KEY",
    "UNITS_PREFIX",
    "ProgressReporter",
    "QueueCost",
    "QueueStats",
    "SharedQueue",
    "shared_queue",
    "validate_segment",
]

U = TypeVar("U")
T = TypeVar("T")


@contextmanager
def shared_queue(
    units: Mapping[str, U],
    *,
    mailbox: Mailbox,
    learner_id: str,
    load: Callable[[U], Iterable[T]],
    prefetch: int = 8,
    order: Iterable[str] | None = None,
    session: ProgressReporter | None = None,
    epoch: int = 0,
    epochs: Iterable[int] | None = None,
    shuffle: int | None = None,
    lease: float = DEFAULT_LEASE,
    wait_for_others: bool = True,
) -> Iterator[SharedQueue[T]]:
    """Share ``units`` among learners: yield the items of the units this learner holds.

    Args:
        units: identifier → unit value, the same mapping on every learner. Identifiers
            become key segments (``units/{identifier}``).
        mailbox: the run's mailbox; every learner of the run opens the same URL.
        learner_id: this learner's name (one key segment), unique among live learners.
            Restarting with the same id resumes this learner's unfinished units.
        load: ``load(unit)`` returns an iterable of items, run in a background thread.
        prefetch: the most items the loader may be ahead of the consumer (at least 1).
        order: this learner's preference order over the identifiers; ones it omits are
            tried afterwards in mapping order.
        session: where to report unit progress; by default the innermost
            :class:`~gradientmail.session.Session` for ``learner_id`` entered in this thread.
        epoch: which pass over the units (0, 1, 2...); each epoch completes every unit once.
        epochs: several passes in one iteration, for example ``range(10)``, in increasing
            order; not with ``epoch``. They flow: once no unit of an epoch is free, the
            learner takes units of the next one while it keeps watching the older (see
            Epochs above). ``queue.epoch`` is the epoch of the item returned last.
        shuffle: a seed: each epoch's preference order is a permutation drawn from
            ``(shuffle, epoch)``, the same on every learner. Not with ``order``.
        lease: seconds without renewal after which others may take this learner's units
            (default 60). Renewed every ``lease / 3`` seconds.
        wait_for_others: when no unit is free, wait for the units others hold and take
            over those of learners that die (default). ``False``: end the iteration
            instead, as lockstep training (DDP) and DataLoader workers need.

    Yields:
        A :class:`SharedQueue`: iterate it for the items; ``.stats`` is its telemetry.

    Raises:
        InvalidKeyError: an identifier or ``learner_id`` is not a valid key segment.
        ConfigurationError: a bad argument; the run at this prefix has other units; or
            another live learner already uses ``learner_id``.
        NotSupportedError: the mailbox does not declare ``Capability.ATOMIC_CREATE``.
        WorkerError: from iteration, after the items buffered before it, when ``load`` or
            the mailbox failed; the original exception is its ``__cause__``.
        LeaseLostError: from iteration, when this learner's units were taken over.
    """
    options = queue_options(
        units, load, prefetch, order, shuffle, lease, wait_for_others, epochs, epoch
    )
    if session is not None:
        check_reporter(session, mailbox)
    reporter = session if session is not None else active_reporter(learner_id)
    if reporter is None:
        other = any_active_reporter()
        if other is not None:
            warnings.warn(
                f"shared_queue for learner {learner_id!r} found an active Session for "
                f"{other.learner_id!r}, not for {learner_id!r}: its units will not be "
                "recorded in that session; give both the same learner id",
                RuntimeWarning,
                stacklevel=3,
            )
    with open_queue(
        options, mailbox=mailbox, learner_id=learner_id, epoch=epoch, reporter=reporter
    ) as queue:
        yield queue
