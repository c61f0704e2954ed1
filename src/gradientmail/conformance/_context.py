"""The framework every conformance property is written in.

A :class:`Property` is a named check of the contract. Its function receives a
:class:`Context` (a mailbox, a key namespace no other property uses, and the
:class:`SuiteOptions`) and returns a short description of what it verified, raises
:class:`PropertyFailed` with a minimal counterexample, :class:`PropertyErrored` when the
store failed in a way that is not a counterexample (racers got errors), or
:class:`PropertySkipped` with the reason. The helpers below format values, keys and
errors the same way in every counterexample.

This module imports nothing from the conformance package but the arithmetic of
:mod:`~gradientmail.conformance._power`, so properties, the stateful model and the runner
all build on it without import cycles.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gradientmail._errors import KeyNotFoundError, MissingDependencyError
from gradientmail.conformance._power import DEFAULT_BOUND
from gradientmail.mailbox import Capability, Mailbox

__all__ = [
    "Check",
    "Context",
    "Property",
    "PropertyErrored",
    "PropertyFailed",
    "PropertySkipped",
    "SuiteOptions",
    "error_text",
    "failure_text",
    "get_or_none",
    "key_text",
    "require_hypothesis",
    "shown",
    "suite_settings",
]


@dataclass(frozen=True)
class SuiteOptions:
    """How hard the suite pushes. The defaults are the CLI's default run.

    Attributes:
        threads: the most racing threads in one race (and CAS counter workers, up to 8).
        processes: the most racing processes in one race, each with its own client.
        seed: seeds hypothesis and every random choice; ``None`` picks one per run.
        quick: fewer hypothesis examples, fewer keys: a smoke test, still racing for real.
        race_keys: keys per race in the strongest race (default 40, or 15 with ``quick``).
        timeout: seconds any one race may take before its racers count as failed.
        bound: the double-win rate the single-winner races must be able to rule out, at
            95 % confidence: they contest enough keys for it (2995 for ``0.001``). ``None``
            means :data:`~gradientmail.conformance._power.DEFAULT_BOUND` (0.5 %) for a full
            run, and no more keys than the fixed races for a ``quick`` one.
    """

    threads: int = 16
    processes: int = 4
    seed: int | None = None
    quick: bool = False
    race_keys: int | None = None
    timeout: float = 300.0
    bound: float | None = None
    #: seconds the preflight (and the check after a store error) waits for an answer.
    preflight_timeout: float = 10.0

    @property
    def target_bound(self) -> float | None:
        """The bound the races are sized for, or ``None`` (quick: the fixed races only)."""
        if self.bound is not None:
            return self.bound
        return None if self.quick else DEFAULT_BOUND

    @property
    def keys_per_race(self) -> int:
        """Keys in the strongest race."""
        if self.race_keys is not None:
            return self.race_keys
        return 15 if self.quick else 40


class PropertyFailed(AssertionError):
    """The store was seen breaking the property. The message is a minimal counterexample."""


class PropertyErrored(Exception):
    """The store failed while the property ran: it raised, refused or stopped answering.

    The property reports FAIL with the cause, but the store was not *seen* breaking it: a
    race whose racers got errors says nothing about double winners. The runner then checks
    whether the store still answers at all.
    """


class PropertySkipped(Exception):
    """The property does not apply to this mailbox. The message says why."""


@dataclass
class Context:
    """What one property runs against."""

    box: Mailbox
    #: Every key the property writes starts with ``ns + "/"``; the runner deletes them after.
    ns: str
    options: SuiteOptions
    seed: int
    #: Where a property can leave free-form notes for the report (e.g. drawn parameters).
    notes: list[str] = field(default_factory=list)
    #: Contested keys this property's single-winner races must reach (``None``: no target).
    contested_target: int | None = None
    #: Contested keys its races have raced cleanly so far; the runner reports them.
    contested: int = 0
    #: Racers' calls in its races that raised ``OutcomeUnknownError`` (allowed after a lost
    #: response; the bytes stored judge those keys).
    unknown_outcomes: int = 0

    def key(self, name: str) -> str:
        """The full key for ``name`` inside this property's namespace."""
        return f"{self.ns}/{name}"

    def short(self, key: str) -> str:
        """``key`` without the namespace, for messages."""
        return key[len(self.ns) + 1 :] if key.startswith(self.ns + "/") else key

    def listed(self, prefix: str) -> list[str]:
        """``box.list(prefix)``, each key shortened by :meth:`short`."""
        return [self.short(k) for k in self.box.list(prefix)]

    def other_client(self) -> Mailbox:
        """A second handle on the same mailbox, with its own client (as another node has)."""
        return pickle.loads(pickle.dumps(self.box))  # type: ignore[no-any-return]


#: A property's function: what it verified, or :class:`PropertyFailed`/:class:`PropertySkipped`.
Check = Callable[[Context], str]


@dataclass(frozen=True)
class Property:
    """One checked property of the mailbox contract."""

    name: str
    #: One line: what a store that breaks this would do to you.
    protects: str
    check: Check
    requires: tuple[Capability, ...] = ()
    #: Whether a failure means concurrent claimants can both win (or lose a won claim).
    atomicity: bool = False
    #: The racers of its single-winner races, if it runs any: its contested keys count
    #: toward the run's bound, and the runner gives it a share of the keys to contest.
    race_mode: Literal["threads", "processes"] | None = None
    #: Modules it imports from the ``conformance`` extra; without them it is INCONCLUSIVE.
    needs: tuple[str, ...] = ()


def shown(value: bytes | None, limit: int = 24) -> str:
    """A stored value for a message: ``missing``, or its first ``limit`` bytes and length."""
    if value is None:
        return "missing"
    text = repr(value[:limit])
    return text + (f"... ({len(value)} bytes)" if len(value) > limit else "")


def key_text(key: str, limit: int = 48) -> str:
    """A key for a message, quoted and cut to ``limit`` characters (keys run to 1024 bytes)."""
    text = repr(key)
    return text if len(text) <= limit else text[: limit - 3] + "...'"


def error_text(exc: BaseException, limit: int = 200) -> str:
    """``Type: message``, shortened: store errors can quote a whole 1024-byte key."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def get_or_none(box: Mailbox, key: str) -> bytes | None:
    """``box.get(key)``, or ``None`` when the key does not exist."""
    try:
        return box.get(key)
    except KeyNotFoundError:
        return None


def require_hypothesis() -> Any:
    """The ``hypothesis`` module.

    Raises:
        MissingDependencyError: it is not installed; the message names the ``conformance``
            extra that brings it.
    """
    try:
        import hypothesis
    except ImportError as exc:
        raise MissingDependencyError("hypothesis", "conformance") from exc
    return hypothesis


def suite_settings(hypothesis: Any, examples: int, **more: Any) -> Any:
    """The suite's hypothesis settings: ``examples`` examples, no database, no deadline,
    no health check, one bug reported, no replay blob (the suite prints its own seed).

    A failure is shrunk, but not *explained*: hypothesis's explain phase replays hundreds of
    variants of the shrunk example to mark which parts matter, each one a round of requests
    to the store under test (minutes on an emulator under load), and the counterexample
    the suite prints is the same without it.
    """
    phases = [p for p in hypothesis.Phase if p.name != "explain"]
    return hypothesis.settings(
        max_examples=examples,
        phases=phases,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        print_blob=False,
        report_multiple_bugs=False,
        **more,
    )


def failure_text(exc: BaseException) -> str:
    """A hypothesis failure as a counterexample: its message and notes, minus replay hints."""
    notes = [n for n in getattr(exc, "__notes__", []) if not n.startswith("You can reproduce")]
    message = str(exc).strip() or type(exc).__name__
    return "\n".join([message, *notes])
