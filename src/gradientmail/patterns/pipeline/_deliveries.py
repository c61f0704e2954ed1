"""Recording deliveries in the background, so that ``next()`` does not wait for the store.

When a mailbox consumer's ``next()`` returns an item, it hands the item's claim to a
:class:`DeliveryRecorder`, whose thread (the shared
:class:`~gradientmail.patterns._in_order.InOrderRecorder`) swaps the claim to ``delivered``
(:meth:`~gradientmail.patterns.pipeline._item_claims.ItemClaims.deliver`, one
``put_if_match``) while the caller works on the item. Before returning the following item,
``next()`` calls :meth:`DeliveryRecorder.wait`: at most one delivery is ever unrecorded,
the one ``next()`` returned last, and a record that failed is raised there.

Why not record before returning: that would put one store round trip on every step of the
training loop (about a millisecond on ``file://``, far more on a loaded disk or an object
store), to close a window that only matters if the consumer dies or is paused within one
round trip of taking an item. ``next()`` checks the consumer's lease first
(:meth:`~gradientmail.patterns._leases.Lease.ensure_fresh`), so no other consumer can take the
item over for at least a quarter of the lease, far longer than the record takes.
"""

from __future__ import annotations

import time

from gradientmail.patterns._in_order import InOrderRecorder
from gradientmail.patterns.pipeline._item_claims import HeldItem, ItemClaims
from gradientmail.patterns.pipeline._stats import ConsumerStats

__all__ = ["DeliveryRecorder"]


class DeliveryRecorder:
    """One consumer's delivery records: written in order, one at a time, by a thread.

    :meth:`record` and :meth:`wait` are called by the thread that iterates the consumer.
    """

    def __init__(self, claims: ItemClaims, stats: ConsumerStats, name: str) -> None:
        self._claims = claims
        self._stats = stats
        self._error: BaseException | None = None
        self._thread: InOrderRecorder[tuple[HeldItem, bool]] = InOrderRecorder(name, self._deliver)
        self._thread.start()

    def record(self, held: HeldItem, *, failed: bool = False) -> None:
        """Start recording that ``next()`` returned ``held``'s item (``failed``: its error).

        The caller has called :meth:`wait` since the previous record.
        """
        assert not self._thread.pending, "wait() for the previous record first"
        self._thread.hand_over((held, failed))

    def wait(self) -> None:
        """Return once every record has landed; raise the error of one that failed.

        Raises:
            LeaseLostError: another consumer took the item over before its record landed.
            BackendError: the store failed.
        """
        start = time.perf_counter()
        self._thread.flush()
        error, self._error = self._error, None
        self._stats.delivery_wait_s += time.perf_counter() - start
        if error is not None:
            raise error

    def close(self) -> BaseException | None:
        """Let a record in flight land, stop the thread, and return its error if it failed."""
        self._thread.stop()
        error, self._error = self._error, None
        return error

    def _deliver(self, entry: tuple[HeldItem, bool]) -> None:
        held, failed = entry
        start = time.perf_counter()
        try:
            self._claims.deliver(held, failed=failed)
        except BaseException as exc:  # noqa: BLE001 - raised by the next wait()
            self._error = exc
        self._stats.deliver_s += time.perf_counter() - start
