"""The claim policy's reads of the store: pages of claims, counted in the queue's stats.

:class:`ClaimPages` is the :class:`~gradientmail.patterns.shared_queue._policy.PageReader`
that a learner hands its :class:`~gradientmail.patterns.shared_queue._policy.ClaimPolicy`:
the policy decides which page to read, this reads it.
"""

from __future__ import annotations

import inspect
import itertools

from gradientmail.mailbox import Capability, Mailbox, SupportsListStartAfter
from gradientmail.patterns.shared_queue._stats import QueueCost

__all__ = ["ClaimPages", "lists_from_a_key"]


def lists_from_a_key(mailbox: Mailbox) -> bool:
    """Whether ``mailbox`` declares partial listings and its ``list`` takes ``start_after``.

    A wrapper may forward an inner mailbox's capabilities while its own ``list`` predates
    partial listings; such a mailbox is treated as one without them.
    """
    if not mailbox.supports(Capability.LIST_START_AFTER):
        return False
    try:
        parameters = inspect.signature(mailbox.list).parameters
    except (TypeError, ValueError):
        return False
    return "start_after" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


class ClaimPages:
    """Lists the claims under ``prefix`` in ``mailbox``; counts each listing in ``cost``.

    Args:
        mailbox: the run's mailbox.
        prefix: the claims' prefix (the epoch's ``units/``).
        cost: where listings and the keys they returned are counted.
    """

    def __init__(self, mailbox: Mailbox, prefix: str, cost: QueueCost) -> None:
        self.mailbox = mailbox
        self.prefix = prefix
        self.cost = cost
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
        return self._counted(keys)

    def everything(self) -> list[str]:
        """Every claimed unit identifier (one listing, paged by the store)."""
        return self._counted(list(self.mailbox.list(self.prefix)))

    def _counted(self, keys: list[str]) -> list[str]:
        self.cost.listings += 1
        self.cost.listed_keys += len(keys)
        cut = len(self.prefix)
        return [key[cut:] for key in keys]
