"""A mailbox wrapper for tests that steer one interleaving or inject one fault.

:class:`Delegating` forwards every attribute to a real mailbox; a test subclasses it and
overrides the one call it intercepts (a ``get`` that lets a producer act first, a
``put_if_absent`` whose response is lost). The real store underneath keeps its own
semantics, so what the test asserts is still what a backend does.
"""

from __future__ import annotations

from typing import Any

from gradientmail import Mailbox


class Delegating:
    """Forwards to ``inner``; subclasses intercept what they need."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
