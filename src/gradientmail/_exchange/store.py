"""Reading and writing versions of a shared model: fragments, the head swap, collection.

Costs, for ``P`` bytes of state in the wire dtype cut into ``F = ceil(P / fragment_bytes)``
fragments:

* reading a version: 1 GET of the head and ``F`` GETs (``P`` bytes);
* writing a version: ``F`` PUTs (``P`` bytes), then one conditional PUT of the head;
* a lost swap: the ``F`` fragments it wrote are deleted (``F`` DELETEs) and it tries again;
* collection: the writer of a new version deletes the fragments of the version that fell
  out of the ``keep`` kept (``F`` DELETEs). Every 16th version its writer also lists
  ``data/`` once and deletes fragments that can never become current (those of a killed
  writer). No listing happens anywhere else.

So storage holds at most ``keep`` versions, plus one version in flight per learner writing,
plus what killed writers left since the last 16th version.

Every request but the deletes goes through ``mailbox``, which an Exchange makes patient (it
rides out an outage, see :mod:`gradientmail.patterns._patience`). Deletes go through
``cleanup``, the mailbox itself: a delete that fails is logged and left to the next sweep,
never waited for and never fatal. A create whose outcome is unknown (the layout, a
fragment) is settled by reading the key back.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from gradientmail._counting import RequestTally
from gradientmail._errors import (
    GradientMailError,
    InvalidDataError,
    KeyNotFoundError,
    OutcomeUnknownError,
)
from gradientmail._exchange.layout import (
    Head,
    Keys,
    check_layout,
    new_data_token,
    start_over,
    token_version,
)
from gradientmail._exchange.stats import ExchangeTraffic, Tally
from gradientmail._exchange.tensors import State, from_wire, to_wire
from gradientmail._exchange.watch import HeadWatch
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.mailbox import Mailbox, Version

log = logging.getLogger("gradientmail.exchange")

SWEEP_EVERY = 16


class Superseded(Exception):
    """A fragment of the version being read is missing: collected (the head moved on
    meanwhile), or deleted (damage: see :class:`~gradientmail._exchange.reader.VersionReader`)."""


class Written(NamedTuple):
    """A version written: its token, fragments, fragment size, and state as stored (the
    values in the wire dtype's precision)."""

    token: str
    fragments: int
    fragment_size: int
    state: State


@dataclass
class SharedStore:
    """One shared model's versions in a mailbox: its requests, and the checks of what they
    return. Holds no state between calls but its config, its request counts and ``watch``."""

    mailbox: Mailbox
    keys: Keys
    wire: torch.dtype
    fragment_bytes: int
    keep: int
    #: A version's fp32 values and int64 counts (integer buffers, stored after the values);
    #: ``(0, 0)`` before the layout is known, when lengths are not checked.
    elements: tuple[int, int] = (0, 0)
    #: Where deletes go (``mailbox`` itself when ``None``): best effort, never waited for.
    cleanup: Mailbox | None = None
    #: Where unknown outcomes are counted, for ``Exchange.stats`` (a learner's store only).
    tally: Tally | None = None
    #: This learner's wall clock: the times in its ledger entry and on the heads it writes.
    clock: Callable[[], float] = time.time
    #: Checks every head read (never older than one read before; the writers' clocks).
    watch: HeadWatch | None = None
    #: What ``mailbox`` and ``cleanup`` counted, when they are counting doors
    #: (:class:`~gradientmail._counting.Counting`) into it: ``Exchange.stats.traffic``.
    requests: RequestTally = field(default_factory=RequestTally)

    @property
    def traffic(self) -> ExchangeTraffic:
        """The requests and bytes counted so far (a view of :attr:`requests`)."""
        return ExchangeTraffic.of(self.requests.counts())

    # -- layout -----------------------------------------------------------------------------

    def ensure_layout(self, layout: dict[str, Any]) -> dict[str, Any]:
        """Create the layout record, or check this model against the one stored; return
        the record that is stored.

        Raises:
            ConfigurationError: the shared model has another model or other shared settings,
                naming the first difference.
            InvalidDataError: the layout is missing while a head exists (it was deleted).
        """
        stored = self.read_layout()
        if stored is None and self.read_head() is not None:
            stored = self.read_layout()  # the first learner writes the layout before the head
            if stored is None:
                raise InvalidDataError(
                    f"{self.keys.layout} is missing while {self.keys.head} names a version: "
                    f"the layout was deleted. {start_over(self.keys.head)}"
                )
        if stored is None:
            if self.create(self.keys.layout, encode_record(layout)):
                return layout
            stored = decode_record(self.mailbox.get(self.keys.layout)) or {}
        check_layout(stored, layout, f"the shared model {self.keys.name!r} in {self.mailbox.url}")
        return stored

    def read_layout(self) -> dict[str, Any] | None:
        try:
            return decode_record(self.mailbox.get(self.keys.layout)) or {}
        except KeyNotFoundError:
            return None

    def create(self, key: str, data: bytes) -> bool:
        """``put_if_absent``, with an unknown outcome settled by reading ``key`` back: ``True``
        when these bytes are there (a create of ours that landed), ``False`` when others are,
        and a new try when the key is absent (the create did not land)."""
        while True:
            try:
                return self.mailbox.put_if_absent(key, data)
            except OutcomeUnknownError:
                if self.tally is not None:
                    self.tally.unknown_outcome()
            try:
                return self.mailbox.get(key) == data
            except KeyNotFoundError:
                continue

    # -- the head ---------------------------------------------------------------------------

    def read_head(self) -> tuple[Head, Version] | None:
        """The head and its version (for a swap), checked by :attr:`watch`."""
        began = self.clock()
        try:
            data, version = self.mailbox.get_versioned(self.keys.head)
        except KeyNotFoundError:
            return None
        return self._watched(data, began), version

    def read_head_plain(self) -> Head | None:
        """The head by a plain read, for readers on a store without compare-and-swap."""
        began = self.clock()
        try:
            data = self.mailbox.get(self.keys.head)
        except KeyNotFoundError:
            return None
        return self._watched(data, began)

    def _watched(self, data: bytes, began: float) -> Head:
        head = Head.decode(data, self.keys.head)
        if self.watch is not None:
            self.watch.seen(head, began, self.clock())
        return head

    def swap_head(self, head: Head, expected: Version) -> Version | None:
        """Compare-and-swap the head; ``None`` when another write came first."""
        data = head.encode()
        return self.mailbox.put_if_match(self.keys.head, data, expected)

    def create_head(self, head: Head) -> bool:
        data = head.encode()
        return self.mailbox.put_if_absent(self.keys.head, data)

    def stored_versions(self) -> int:
        """The highest version whose fragments are stored (one listing); -1 for none."""
        highest = -1
        for key in self.mailbox.list(self.keys.data):
            version = token_version(key[len(self.keys.data) :].split("/", 1)[0])
            highest = max(highest, -1 if version is None else version)
        return highest

    def missing(self) -> InvalidDataError:
        """The error for a head missing while versions are stored: it was deleted."""
        return InvalidDataError(
            f"{self.keys.head} is missing, but {self.keys.data} holds versions of shared model "
            f"{self.keys.name!r}: the head was deleted (a lifecycle rule, a cleanup, a partial "
            f"restore), and a new start would drop their training. {start_over(self.keys.head)}"
        )

    # -- versions ---------------------------------------------------------------------------

    @property
    def _itemsize(self) -> int:
        return torch.empty((), dtype=self.wire).element_size()

    def read_state(self, head: Head) -> State:
        """The state of ``head``'s version, each fragment's length checked against the layout.

        Raises:
            Superseded: a fragment is missing.
            InvalidDataError: the head names another number of fragments than the layout
                makes, or a fragment has another length (naming it and both lengths).
        """
        values, counts = self.elements
        total = values * self._itemsize + 8 * counts
        if total and head.fragment_size:
            expected = max(1, math.ceil(total / head.fragment_size))
            if head.fragments != expected:
                raise InvalidDataError(
                    f"{self.keys.head} names {head.fragments} fragments for version "
                    f"{head.version}, where the layout's {total} bytes in fragments of "
                    f"{head.fragment_size} make {expected}. {start_over(self.keys.head)}"
                )
        chunks: list[bytes] = []
        for index in range(head.fragments):
            key = self.keys.fragment(head.token, index)
            try:
                chunks.append(self.mailbox.get(key))
            except KeyNotFoundError as exc:
                raise Superseded(head.token) from exc
            if total:
                self._check_length(head, index, chunks, total)
        data = b"".join(chunks)
        split = len(data) - 8 * counts
        count_values = torch.zeros(0, dtype=torch.int64)
        if counts:
            count_values = torch.frombuffer(bytearray(data[split:]), dtype=torch.int64)
        return State(from_wire(data[:split], self.wire), count_values)

    def _check_length(self, head: Head, index: int, chunks: list[bytes], total: int) -> None:
        size = head.fragment_size or (len(chunks[0]) if head.fragments > 1 else total)
        last = index == head.fragments - 1
        expected = total - size * (head.fragments - 1) if last else size
        if len(chunks[index]) != expected:
            raise InvalidDataError(
                f"{self.keys.fragment(head.token, index)} holds {len(chunks[index])} bytes "
                f"where the layout of shared model {self.keys.name!r} makes {expected}: it was "
                f"changed by another program. {start_over(self.keys.head)}"
            )

    def missing_fragments(self, head: Head) -> list[str]:
        """The keys of ``head``'s fragments that are not stored (one listing)."""
        present = set(self.mailbox.list(self.keys.fragment(head.token, 0)[:-5]))
        wanted = [self.keys.fragment(head.token, index) for index in range(head.fragments)]
        return [key for key in wanted if key not in present]

    def write_state(self, version: int, state: State) -> Written:
        """Write ``state`` as the fragments of a new token."""
        token = new_data_token(version)
        values, stored = to_wire(state.values, self.wire)
        data = values + state.counts.to(torch.int64).contiguous().numpy().tobytes()
        itemsize = self._itemsize
        step = max(itemsize, self.fragment_bytes // itemsize * itemsize)
        count = max(1, math.ceil(len(data) / step))
        for index in range(count):
            # A create, not a put: the token is new, and on file:// a create takes no lock,
            # so a learner stopped mid-write holds up no one else's writes.
            key = self.keys.fragment(token, index)
            if not self.create(key, data[index * step : (index + 1) * step]):
                raise InvalidDataError(f"{key} existed before this learner wrote it")
        return Written(token, count, min(step, len(data)), State(stored, state.counts))

    def delete_data(self, token: str, count: int) -> None:
        """Delete a version's fragments, as far as the store lets: what is left, the next
        sweep deletes."""
        cleanup = self.cleanup or self.mailbox
        for index in range(count):
            key = self.keys.fragment(token, index)
            try:
                cleanup.delete(key)
            except GradientMailError as exc:
                log.info("could not delete %s (%s); left for the sweep", key, exc)

    def collect(self, head: Head, dropped: list[list[Any]]) -> None:
        """Delete the versions that left the history; every 16th version, sweep orphans."""
        for _version, token, count in dropped:
            self.delete_data(str(token), int(count))
        if head.version % SWEEP_EVERY == 0:
            self.sweep(head)

    def sweep(self, head: Head) -> int:
        """Delete fragments that can never become current; return how many keys went.

        A token whose version is at most the head's and that the history does not name was
        written by a swap that lost or a writer that died: no later swap can name it, since
        a swap that creates version ``v`` names a token written for ``v``.
        """
        kept = {str(entry[1]) for entry in head.history}
        cleanup = self.cleanup or self.mailbox
        gone = 0
        try:
            for key in cleanup.list(self.keys.data):
                token = key[len(self.keys.data) :].split("/", 1)[0]
                version = token_version(token)
                if version is not None and version <= head.version and token not in kept:
                    cleanup.delete(key)
                    gone += 1
        except GradientMailError as exc:
            log.info("the sweep of %s stopped (%s); the next one goes on", self.keys.data, exc)
        return gone

    def next_history(
        self, head: Head, version: int, token: str, count: int
    ) -> tuple[list[list[Any]], list[list[Any]]]:
        """The history after adding a version, and the entries that fell out of it."""
        history = [*head.history, [version, token, count]]
        return history[-self.keep :], history[: -self.keep]
