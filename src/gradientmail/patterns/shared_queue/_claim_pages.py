"""The claim policy's reads of the store: pages of claims.

:class:`ClaimPages` is the :class:`~gradientmail.patterns.shared_queue._policy.PageReader`
that a learner hands its :class:`~gradientmail.patterns.shared_queue._policy.ClaimPolicy`:
the policy decides which page to read, this reads it (through the learner's mailbox, whose
door counts each listing).
"""

from __future__ import annotations

import itertools

from gradientmail._forwarding import takes_start_after
from gradientmail.mailbox import Capability, Mailbox, SupportsListStartAfter

__all__ = ["ClaimPages", "lists_from_a_key"]


def lists_from_a_key(mailbox: Mailbox) -> bool:
    """Whether ``mailbox`` declares partial listings and its ``list`` takes ``start_after``.

    A wrapper may forward an inner mailbox's capabilities while its own ``list`` predates
    partial listings; such a mailbox is treated as one without them.
    """
    return mailbox.supports(Capability.LIST_START_AFTER) and takes_start_after(mailbox)


class ClaimPages:
    """Lists the claims under ``prefix`` in ``mailbox``.

    Args:
        mailbox: the run's mailbox.
        prefix: the claims' prefix (the epoch's ``units/``).
    """

    def __init__(self, mailbox: Mailbox, prefix: str) -> None:
        self.mailbox = mailbox
        self.prefix = prefix
        self.partial = lists_from_a_key(mailbox)

    def page(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` claimed unit identifiers after ``after``, in one request.

        Only where :attr:`partial` is true.
        """
        mailbox = self.mailbox
        assert isinstance(mailbox, SupportsListStartAfter)
        prefix = self.prefix
        start = prefix + after if after is not None else None
        keys = list(itertools.islice(mailbox.list(prefix, start_after=start), limit))
        return self._identifiers(keys)

    def everything(self) -> list[str]:
        """Every claimed unit identifier (one listing, paged by the store)."""
        return self._identifiers(list(self.mailbox.list(self.prefix)))

    def _identifiers(self, keys: list[str]) -> list[str]:
        cut = len(self.prefix)
        return [key[cut:] for key in keys]
