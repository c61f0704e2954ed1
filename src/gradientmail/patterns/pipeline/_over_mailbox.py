"""The mailbox transport: items travel as bytes through any mailbox, claimed exactly once.

:class:`MailboxTransport` makes the producer
(:mod:`~gradientmail.patterns.pipeline._mailbox_producer`) and consumer
(:mod:`~gradientmail.patterns.pipeline._mailbox_consumer`) handles of one run; what they
share is its :class:`~gradientmail.patterns.pipeline._mailbox_run.MailboxRun`. What each key
holds is in
:mod:`~gradientmail.patterns.pipeline._records`; the protocol is in ``docs/pipeline.md``.
"""

from __future__ import annotations

from typing import Any

from gradientmail.patterns.pipeline._mailbox_consumer import MailboxConsumer
from gradientmail.patterns.pipeline._mailbox_producer import MailboxProducer
from gradientmail.patterns.pipeline._mailbox_run import MailboxRun
from gradientmail.patterns.pipeline._records import consumer_lease_key
from gradientmail.patterns.pipeline._roles import Consumer, Decode, Producer, Transport

__all__ = ["MailboxTransport"]


class MailboxTransport(MailboxRun, Transport[bytes]):
    """The mailbox transport: makes the producer and consumer handles of one run.

    Raises (on construction): as
    :class:`~gradientmail.patterns.pipeline._mailbox_run.MailboxRun`.
    """

    def producer(self, producer_id: str) -> Producer[bytes]:
        return MailboxProducer(self, producer_id)

    def consumer(self, consumer_id: str, decode: Decode | None) -> Consumer[Any]:
        self._check_key(consumer_lease_key(consumer_id), "consumer", consumer_id)
        return MailboxConsumer(self, consumer_id, decode)
