"""A run's layout in its mailbox, and how a queue finds the session it reports to.

Run layout: every key a ``shared_queue`` run writes is named here, and nowhere else, so
``gradientmail status`` and the queue read the same keys.

``manifest``
    ``{"units": total, "digest": ..., "created_at": unix seconds, ...}``, created with
    ``put_if_absent`` by the first learner to start.
``units/{identifier}``
    One claim per unit taken (see :mod:`gradientmail.patterns.claims`).
``learners/{learner_id}``
    A :class:`~gradientmail.session.Session`'s progress record.

The *active-reporter stack*: a ``Session`` entered in a thread pushes itself, and a queue
started in the same thread with the same learner id reports to it, which makes
``with session, shared_queue(...) as batches:`` work without extra arguments.
"""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = [
    "LEARNERS_PREFIX",
    "MANIFEST_KEY",
    "UNITS_PREFIX",
    "ProgressReporter",
    "active_reporter",
    "pop_reporter",
    "push_reporter",
]

#: ``{"units": total, ...}``, created by the first learner to start.
MANIFEST_KEY = "manifest"
#: Claims live under this prefix: ``units/{identifier}``.
UNITS_PREFIX = "units/"
#: Progress records live under this prefix: ``learners/{learner_id}``.
LEARNERS_PREFIX = "learners/"


class ProgressReporter(Protocol):
    """What the queue tells a progress sink (a :class:`~gradientmail.session.Session`).

    Calls come from the loader thread (``unit_claimed``) and the consumer's thread (the
    others), so implementations must be thread-safe and cheap (no store calls).
    """

    @property
    def learner_id(self) -> str:
        """The learner this sink reports for."""
        ...

    def unit_claimed(self, identifier: str) -> None:
        """The learner created the claim of ``identifier``."""

    def unit_started(self, identifier: str) -> None:
        """The unit's first item reached the consumer."""

    def unit_finished(self, identifier: str, items: int) -> None:
        """The consumer asked for the next item after the unit's last (``items`` in all)."""


_active = threading.local()


def push_reporter(reporter: ProgressReporter) -> None:
    """Make ``reporter`` the innermost active reporter of the calling thread."""
    stack: list[ProgressReporter] = getattr(_active, "stack", None) or []
    stack.append(reporter)
    _active.stack = stack


def pop_reporter(reporter: ProgressReporter) -> None:
    """Remove ``reporter`` from the calling thread's stack (if it is there)."""
    stack: list[ProgressReporter] = getattr(_active, "stack", [])
    if reporter in stack:
        stack.remove(reporter)


def active_reporter(learner_id: str) -> ProgressReporter | None:
    """The innermost reporter for ``learner_id`` entered in this thread, if any."""
    stack: list[ProgressReporter] = getattr(_active, "stack", [])
    for reporter in reversed(stack):
        if reporter.learner_id == learner_id:
            return reporter
    return None
