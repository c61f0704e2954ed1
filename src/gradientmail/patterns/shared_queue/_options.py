"""A ``shared_queue``'s arguments, checked once: :class:`QueueOptions`, by :func:`queue_options`.

``shared_queue()`` and the DataLoader adapter (``SharedQueueDataset``, which opens one queue
per worker and epoch) both build their options here, so every argument is checked in one
place, with one message naming the problem and the fix. What differs per queue opened (the
mailbox handle, the learner id, the session) is checked by its opener; the epoch by
:func:`check_epoch`, here and in ``SharedQueueDataset.set_epoch``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gradientmail._errors import ConfigurationError
from gradientmail.backends._options import lease_seconds, positive
from gradientmail.patterns.shared_queue._policy.preference import preference_order

__all__ = ["DEFAULT_LEASE", "QueueOptions", "check_epoch", "queue_options"]

#: Seconds a learner's lease lasts without renewal before others may take its units.
DEFAULT_LEASE = 60.0


@dataclass(frozen=True)
class QueueOptions:
    """The checked arguments every queue of one job opens with (see ``shared_queue``)."""

    units: Mapping[str, Any]
    load: Callable[[Any], Iterable[Any]]
    prefetch: int
    order: Sequence[str] | None
    shuffle: int | None
    lease: float
    wait_for_others: bool
    #: Several epochs in one iteration (they flow), or ``None``: the one epoch given when
    #: a queue opens.
    epochs: tuple[int, ...] | None

    def passes(self, epoch: int) -> list[tuple[int, list[str]]]:
        """Each epoch a queue opened at ``epoch`` runs, with its preference order."""
        passes = [epoch] if self.epochs is None else list(self.epochs)
        return [(k, preference_order(self.units, self.order, self.shuffle, k)) for k in passes]


def queue_options(
    units: object,
    load: object,
    prefetch: object,
    order: Iterable[str] | None,
    shuffle: object,
    lease: object,
    wait_for_others: object,
    epochs: object,
    epoch: object = 0,
) -> QueueOptions:
    """Check a queue's arguments (see ``shared_queue``, in its order); ``epoch`` only
    against ``epochs``.

    Raises:
        InvalidKeyError: an identifier is not a valid key segment.
        ConfigurationError: naming the argument, what it must be, and the value given.
    """
    if not isinstance(units, Mapping):
        raise ConfigurationError(
            f"units must be a mapping of identifier -> unit, not {type(units).__name__}; "
            "e.g. {f'shard-{i:05d}': path for i, path in enumerate(paths)}"
        )
    if not callable(load):
        raise ConfigurationError(f"load must be callable (unit -> iterable of items): {load!r}")
    check_epoch(epoch)
    if shuffle is not None and (isinstance(shuffle, bool) or not isinstance(shuffle, int)):
        raise ConfigurationError(f"shuffle must be an int seed or None, not {shuffle!r}")
    passes = None if epochs is None else tuple(_check_epochs(epochs, epoch))
    if not isinstance(wait_for_others, bool):
        raise ConfigurationError(f"wait_for_others must be True or False, not {wait_for_others!r}")
    if order is not None and not isinstance(order, str) and isinstance(order, Iterable):
        order = tuple(order)  # read once: a generator given as order keeps its preference
    options = QueueOptions(
        units=units,
        load=load,
        prefetch=positive(prefetch, "prefetch", integer=True),
        order=order,
        shuffle=shuffle,
        lease=lease_seconds(lease),
        wait_for_others=wait_for_others,
        epochs=passes,
    )
    preference_order(units, order, shuffle, 0)  # every identifier, and the order, checked now
    return options


def check_epoch(epoch: object) -> int:
    """``epoch``, or ``ConfigurationError`` when it is not an int >= 0."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ConfigurationError(f"epoch must be an int >= 0, not {epoch!r}")
    return epoch


def _check_epochs(epochs: object, epoch: object) -> list[int]:
    """``epochs`` as a list, or ``ConfigurationError`` naming what is wrong with it."""
    if epoch != 0:
        raise ConfigurationError(
            f"give epoch= or epochs=, not both (epoch={epoch!r}, epochs={epochs!r}); "
            "epochs=range(k, n) starts at epoch k"
        )
    if isinstance(epochs, (str, bytes)) or not isinstance(epochs, Iterable):
        raise ConfigurationError(
            f"epochs must be an iterable of ints >= 0 such as range(10), not {epochs!r}"
        )
    passes = list(epochs)
    if not passes or any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in passes):
        raise ConfigurationError(
            f"epochs must be a non-empty iterable of ints >= 0 such as range(10), not {epochs!r}"
        )
    if any(later <= earlier for earlier, later in itertools.pairwise(passes)):
        raise ConfigurationError(f"epochs must increase, each once: {passes!r}")
    return passes
