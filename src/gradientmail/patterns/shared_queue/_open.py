"""Opening one learner's queue: the one door ``shared_queue()`` and the DataLoader adapter use.

Both build their :class:`~gradientmail.patterns.shared_queue._options.QueueOptions` first;
:func:`open_queue` checks what is particular to this queue (the mailbox, the learner id),
builds it with its completion gate, starts it (the manifest, the lease, the first epoch),
and closes it on the way out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gradientmail._errors import NotSupportedError
from gradientmail._keys import validate_segment
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns._progress import ProgressReporter, queue_entered, queue_left
from gradientmail.patterns.shared_queue._completion_gate import IMMEDIATELY, CompletionGate
from gradientmail.patterns.shared_queue._consumer import SharedQueue
from gradientmail.patterns.shared_queue._options import QueueOptions
from gradientmail.patterns.shared_queue._scope import Setup

__all__ = ["open_queue"]


@contextmanager
def open_queue(
    options: QueueOptions,
    *,
    mailbox: Mailbox,
    learner_id: str,
    epoch: int,
    reporter: ProgressReporter | None,
    gate: CompletionGate = IMMEDIATELY,
    siblings: frozenset[str] = frozenset(),
) -> Iterator[SharedQueue[Any]]:
    """Run ``learner_id``'s queue over ``mailbox`` for ``epoch`` (or ``options.epochs``).

    ``siblings`` are the learners loading for the same consumer (a rank's other DataLoader
    workers): units they still hold when this learner's epoch ends are not warned about.

    Raises:
        InvalidKeyError: ``learner_id`` is not a valid key segment.
        NotSupportedError: the mailbox does not declare ``Capability.ATOMIC_CREATE``.
        ConfigurationError: the run at this prefix has other units, or another live
            learner already uses ``learner_id``.
    """
    if not mailbox.supports(Capability.ATOMIC_CREATE):
        raise NotSupportedError(
            f"shared_queue over {mailbox.url} needs atomic put_if_absent "
            "(Capability.ATOMIC_CREATE), which this mailbox does not declare; without it two "
            "learners could both claim one unit"
        )
    validate_segment(learner_id, "learner id")
    setup = Setup(
        mailbox=mailbox,
        units=options.units,
        load=options.load,
        learner_id=learner_id,
        prefetch=options.prefetch,
        reporter=reporter,
        wait_for_others=options.wait_for_others,
        shared_order=options.order is None,
        gate=gate,
        siblings=siblings,
    )
    queue: SharedQueue[Any] = SharedQueue(setup, options.passes(epoch), lease=options.lease)
    try:
        queue._start()
        with _running(queue):
            yield queue
    finally:
        queue.close()


@contextmanager
def _running(queue: SharedQueue[Any]) -> Iterator[None]:
    queue_entered(queue.learner_id)
    try:
        yield
    finally:
        queue_left(queue.learner_id)
