"""What every mailbox wrapper passes through unchanged: the inner mailbox's declarations."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

from gradientmail.mailbox import Capability, Mailbox

__all__ = ["Forwarding", "list_after", "takes_start_after"]


def takes_start_after(mailbox: Mailbox) -> bool:
    """Whether ``mailbox.list`` takes ``start_after`` (a wrapper may predate it, while it
    forwards an inner mailbox's capabilities)."""
    try:
        parameters = inspect.signature(mailbox.list).parameters
    except (TypeError, ValueError):
        return False
    return "start_after" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def list_after(mailbox: Mailbox, prefix: str, after: str | None, takes: bool) -> Iterator[str]:
    """``mailbox.list(prefix)`` from the first key past ``after`` (``None``: from the start);
    ``takes`` is :func:`takes_start_after` of ``mailbox``: when false, the keys up to
    ``after`` are listed and skipped here."""
    if after is None:
        return mailbox.list(prefix)  # the prefix is checked here, before any request
    if takes:
        return mailbox.list(prefix, start_after=after)  # type: ignore[call-arg]
    return (key for key in mailbox.list(prefix) if key > after)


class Forwarding:
    """Base for a wrapper around the mailbox ``inner``: its URL, capabilities and key limit
    are ``inner``'s, so code behind the wrapper behaves as it would on ``inner``. A subclass
    sets ``inner`` and implements the calls."""

    inner: Mailbox

    @property
    def url(self) -> str:
        """``inner``'s URL."""
        return self.inner.url

    @property
    def capabilities(self) -> frozenset[Capability]:
        """``inner``'s capabilities."""
        return self.inner.capabilities

    def supports(self, capability: Capability) -> bool:
        """Whether ``inner`` declares ``capability``."""
        return self.inner.supports(capability)

    @property
    def max_key_bytes(self) -> int:
        """``inner``'s longest key."""
        return self.inner.max_key_bytes
