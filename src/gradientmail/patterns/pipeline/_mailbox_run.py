"""What every handle of one mailbox pipeline run shares: the mailbox, the declared
producers and the timings (:class:`MailboxRun`), and the run's :class:`Manifest`.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from gradientmail._errors import ConfigurationError, InvalidKeyError, NotSupportedError
from gradientmail._keys import validate_key
from gradientmail.backends._options import lease_seconds, positive
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns._claims import create_settled
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._patience import Patient
from gradientmail.patterns.pipeline._records import (
    ABORTED_KEY,
    MANIFEST_KEY,
    Aborted,
    Manifest,
    producer_keys,
)

__all__ = ["MailboxRun", "MailboxSettings"]


@dataclass(frozen=True)
class MailboxSettings:
    """The bounds and timings of a mailbox run (see ``Pipeline.over_mailbox``), checked here.

    Raises (on construction):
        ConfigurationError: one is not a positive number (an int for ``capacity`` and
            ``prefetch``), or ``lease`` is not more than twice ``heartbeat_interval``.
    """

    capacity: int
    stall_timeout: float | None
    prefetch: int
    heartbeat_interval: float
    lease: float
    poll_interval: float

    def __post_init__(self) -> None:
        positive(self.capacity, "capacity", integer=True)
        positive(self.stall_timeout, "stall_timeout", allow_none=True)
        positive(self.prefetch, "prefetch", integer=True)
        positive(self.heartbeat_interval, "heartbeat_interval")
        lease_seconds(self.lease)
        positive(self.poll_interval, "poll_interval")
        if self.lease <= 2 * self.heartbeat_interval:
            raise ConfigurationError(
                f"lease ({self.lease}) must be more than twice heartbeat_interval "
                f"({self.heartbeat_interval}), or a live producer could be declared lost"
            )


class MailboxRun:
    """What every producer and consumer of one mailbox run shares.

    Raises (on construction):
        NotSupportedError: the mailbox does not declare ``Capability.ATOMIC_CREATE``.
        ConfigurationError: a producer id makes a key longer than the mailbox accepts, or
            the mailbox holds a pipeline declared with other producers or capacity.
    """

    def __init__(
        self, mailbox: Mailbox, declared: tuple[str, ...], settings: MailboxSettings
    ) -> None:
        if not mailbox.supports(Capability.ATOMIC_CREATE):
            raise NotSupportedError(
                f"a pipeline over {mailbox.url} needs atomic put_if_absent "
                "(Capability.ATOMIC_CREATE), which this mailbox does not declare; without it "
                "two consumers could both claim one item"
            )
        self.mailbox = mailbox
        self.declared = declared
        self.settings = settings
        #: Each producer's share of ``capacity``: the most of its items left unclaimed.
        self.share = math.ceil(settings.capacity / len(declared))
        self._check_key_lengths()
        self._check_manifest()

    def _check_key_lengths(self) -> None:
        """Refuse up front a producer id whose keys the store would refuse mid-run."""
        for producer in self.declared:
            for key in producer_keys(producer):
                self._check_key(key, "producer", producer)

    def _check_key(self, key: str, what: str, name: str) -> None:
        try:
            validate_key(key, self.mailbox.max_key_bytes)
        except InvalidKeyError as exc:
            raise ConfigurationError(
                f"{what} id {name!r} is too long for {self.mailbox.url}: its key {key!r} "
                f"breaks a key rule ({exc.rule})"
            ) from exc

    def starting(self, what: str) -> Patient:
        """The mailbox for a start's writes and reads (the manifest, a producer's
        registration): each request waits out a store outage shorter than the lease.
        ``what`` names who waits, for the log."""
        return Patient(self.mailbox, self.settings.lease, threading.Event(), what)

    def _check_manifest(self) -> None:
        manifest = Manifest(self.declared, self.settings.capacity)
        body = manifest.to_bytes()
        box = self.starting("a pipeline handle")
        if create_settled(box, MANIFEST_KEY, body, lambda stored: stored == body):
            return  # ours (or, settling an ambiguous create, the same bytes)
        stored = Manifest.read(box, MANIFEST_KEY)
        if stored != manifest:
            shown = None if stored is None else stored.fields()
            raise ConfigurationError(
                f"{self.mailbox.url} already holds a pipeline declared as {shown}, but this "
                f"handle declares {manifest.fields()}; every handle of one run must pass the "
                "same producers and capacity (or use a new namespace for a new run)"
            )

    def lease(self, key: str, holder: str) -> Lease:
        """A producer's or consumer's lease, renewed every ``heartbeat_interval``."""
        settings = self.settings
        return Lease(
            self.mailbox, key, holder, duration=settings.lease, period=settings.heartbeat_interval
        )

    def abort(self, reason: str) -> None:
        create_settled(self.mailbox, ABORTED_KEY, Aborted(reason).to_bytes())

    def aborted(self) -> Aborted | None:
        """The abort record, if the pipeline was aborted or failed."""
        return Aborted.read(self.mailbox, ABORTED_KEY)
