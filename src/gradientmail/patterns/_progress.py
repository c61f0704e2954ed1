"""How a queue finds the session it reports to, and what it reports.

The *active-reporter stack*: a ``Session`` entered in a thread pushes itself, and a queue
started in the same thread with the same learner id reports to it, which makes
``with session, shared_queue(...) as batches:`` work without extra arguments.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from gradientmail._errors import ConfigurationError
from gradientmail.backends._options import redact
from gradientmail.mailbox import Mailbox

__all__ = [
    "ProgressReporter",
    "active_queues",
    "active_reporter",
    "any_active_reporter",
    "check_reporter",
    "pop_reporter",
    "push_reporter",
    "queue_entered",
    "queue_left",
]


class ProgressReporter(Protocol):
    """What the queue tells a progress sink (a :class:`~gradientmail.session.Session`).

    Calls come from the loader thread (``unit_claimed``) and the consumer's thread (the
    others), so implementations must be thread-safe and cheap (no store calls). ``epoch``
    names the pass the unit belongs to: one identifier is a different unit in each epoch.
    """

    @property
    def learner_id(self) -> str:
        """The learner this sink reports for."""
        ...

    def unit_claimed(self, identifier: str, reclaimed: bool = False, epoch: int = 0) -> None:
        """The learner claimed ``identifier`` (``reclaimed``: took it over from another)."""

    def unit_released(self, identifier: str, epoch: int = 0) -> None:
        """The learner gave ``identifier`` back unfinished (it left early)."""

    def unit_started(self, identifier: str, epoch: int = 0) -> None:
        """The unit's first item reached the consumer."""

    def unit_finished(self, identifier: str, items: int, epoch: int = 0) -> None:
        """The consumer asked for the next item after the unit's last (``items`` in all)."""

    def data_waited(self, seconds: float) -> None:
        """The consumer waited ``seconds`` for its next item (the loader was behind)."""


_active = threading.local()


def _stack(name: str) -> list[Any]:
    """The calling thread's stack called ``name`` (created empty on first use)."""
    stack: list[Any] | None = getattr(_active, name, None)
    if stack is None:
        stack = []
        setattr(_active, name, stack)
    return stack


def _remove(name: str, item: object) -> None:
    stack = _stack(name)
    if item in stack:
        stack.remove(item)


def push_reporter(reporter: ProgressReporter) -> None:
    """Make ``reporter`` the innermost active reporter of the calling thread."""
    _stack("reporters").append(reporter)


def pop_reporter(reporter: ProgressReporter) -> None:
    """Remove ``reporter`` from the calling thread's stack (if it is there)."""
    _remove("reporters", reporter)


def any_active_reporter() -> ProgressReporter | None:
    """The innermost reporter entered in this thread, whatever its learner id."""
    stack: list[ProgressReporter] = _stack("reporters")
    return stack[-1] if stack else None


def queue_entered(learner_id: str) -> None:
    """Note that a queue for ``learner_id`` runs in this thread (for identity warnings)."""
    _stack("queues").append(learner_id)


def queue_left(learner_id: str) -> None:
    """Undo :func:`queue_entered`."""
    _remove("queues", learner_id)


def active_queues() -> tuple[str, ...]:
    """Learner ids of the queues running in this thread, outermost first."""
    return tuple(_stack("queues"))


def active_reporter(learner_id: str) -> ProgressReporter | None:
    """The innermost reporter for ``learner_id`` entered in this thread, if any."""
    stack: list[ProgressReporter] = _stack("reporters")
    for reporter in reversed(stack):
        if reporter.learner_id == learner_id:
            return reporter
    return None


def check_reporter(session: object, mailbox: Mailbox) -> None:
    """Check a queue's ``session=``: a progress sink, publishing to the queue's own mailbox.

    Raises:
        ConfigurationError: ``session`` lacks a reporter's methods, or is a Session on
            another mailbox (``gradientmail status`` of the run would not show it).
    """
    needed = ("unit_claimed", "unit_released", "unit_started", "unit_finished", "data_waited")
    missing = [name for name in needed if not callable(getattr(session, name, None))]
    if missing or not isinstance(getattr(session, "learner_id", None), str):
        raise ConfigurationError(
            f"session must be a gradientmail.Session (or a progress sink with learner_id and "
            f"{', '.join(needed)}), not {type(session).__name__} {session!r}"
        )
    theirs = getattr(session, "mailbox", None)
    if isinstance(theirs, Mailbox) and theirs.url != mailbox.url:
        raise ConfigurationError(
            f"session for {session.learner_id!r} publishes to {redact(theirs.url)}, but the "  # type: ignore[attr-defined]
            f"queue runs at {redact(mailbox.url)}: gradientmail status of the run would not "
            "show this learner; open the Session on the queue's mailbox"
        )
