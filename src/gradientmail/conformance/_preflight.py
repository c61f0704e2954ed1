"""Can the suite test this store at all? One write, read, list and delete, fast.

:func:`preflight` runs the four plain operations the suite needs before any property, with
a deadline (:data:`DEADLINE`, 10 s), so that a dead endpoint, missing credentials or a
missing bucket are reported once, with the real cause and the fix, instead of as a FAIL of
every property. The runner calls it again after a property fails with a store error, to
tell "this property broke the store" from "the store broke one property".

A :class:`Problem` means the store could not be *tested*: the verdict is INCONCLUSIVE,
never "not safe".
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

from gradientmail._errors import (
    AccessDeniedError,
    BackendError,
    BucketNotFoundError,
    EndpointUnreachableError,
    MissingDependencyError,
    ProtocolError,
    TransientBackendError,
)
from gradientmail.mailbox import Mailbox

__all__ = ["DEADLINE", "Problem", "diagnose", "preflight"]

#: Seconds the four operations may take together before the store counts as not answering.
DEADLINE = 10.0


@dataclass(frozen=True)
class Problem:
    """Why the store cannot be tested, and what to do about it."""

    #: The kind of problem in a few words, e.g. ``the store is unreachable``.
    summary: str
    #: What happened: the operation and the error it raised.
    cause: str
    #: What to do, e.g. ``check the endpoint_url option, and that the store runs``.
    fix: str
    #: The store answered outside the protocol its backend relies on: not a test that
    #: could not run, but a store that fails (the verdict is FAIL, not INCONCLUSIVE).
    violation: bool = False

    def __str__(self) -> str:
        return f"{self.summary}: {self.cause}. Fix: {self.fix}"


#: Error class → (what it means, the fix), most specific first.
_DIAGNOSES: tuple[tuple[type[BackendError], str, str], ...] = (
    (
        AccessDeniedError,
        "credentials are missing or refused",
        "give this process credentials that may write under the URL, through the SDK's "
        "usual chain (environment variables, a profile or config file), never in the URL",
    ),
    (
        BucketNotFoundError,
        "the bucket or container does not exist",
        "create it, or point the URL at one that exists",
    ),
    (
        EndpointUnreachableError,
        "the store is unreachable",
        "check the endpoint (the endpoint_url option for S3-compatible stores), the network, "
        "and that the service runs",
    ),
    (
        TransientBackendError,
        "the store kept failing",
        "check the store's health and load, then run the suite again",
    ),
    (
        BackendError,
        "the store refused a plain {operation}",
        "check the URL, its options and the permissions under it",
    ),
)


def diagnose(exc: BaseException, operation: str) -> Problem:
    """The :class:`Problem` behind an error that ``operation`` raised, most specific first."""
    text = f"{operation} raised {type(exc).__name__}: {exc}"
    if isinstance(exc, MissingDependencyError):
        fix = f"pip install 'gradientmail[{exc.extra}]'"
        return Problem(f"the {exc.extra} extra is not installed", text, fix)
    if isinstance(exc, ProtocolError):
        return Problem(
            "the store breaks the protocol its backend relies on",
            text,
            "use a store that implements it (for gs://, Google Cloud Storage or an emulator "
            "that sends object generations), or a backend written for this store",
            violation=True,
        )
    for kind, summary, fix in _DIAGNOSES:
        if isinstance(exc, kind):
            return Problem(summary.format(operation=operation), text, fix)
    return Problem(
        "the backend failed with an unexpected error (a bug in it, or in its client)",
        text,
        "run `gradientmail race URL` to see the error on its own, and report it",
    )


def _probe(box: Mailbox, outcome: list[Problem | None]) -> None:
    key = f"preflight-{uuid.uuid4().hex[:12]}"
    operation = "put"
    try:
        box.put(key, b"gradientmail preflight")
        operation = "get"
        box.get(key)
        operation = "list"
        next(iter(box.list(key)), None)
        operation = "delete"
        box.delete(key)
    except Exception as exc:  # noqa: BLE001 - whatever stops the probe is its finding
        outcome.append(diagnose(exc, operation))
        return
    outcome.append(None)


def preflight(box: Mailbox, deadline: float = DEADLINE) -> Problem | None:
    """One ``put``, ``get``, ``list`` and ``delete`` of a fresh key; ``None`` if all answered.

    Only errors count: wrong bytes or a missing listing are the properties' business. The
    probe runs on a daemon thread, so a store that never answers costs ``deadline`` seconds
    and no more (the thread is left behind).
    """
    outcome: list[Problem | None] = []
    worker = threading.Thread(target=_probe, args=(box, outcome), daemon=True)
    worker.start()
    worker.join(deadline)
    if outcome:
        return outcome[0]
    return Problem(
        "the store does not answer",
        f"a put, get, list and delete did not complete within {deadline:g} s",
        "check the endpoint, the network and the store's health; a store this slow cannot "
        "be raced in reasonable time",
    )
