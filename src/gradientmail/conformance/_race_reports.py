"""What a race saw, and what it means: the reports of :mod:`gradientmail.conformance._races`.

:class:`RaceReport` judges a put-if-absent race (exactly one winner per key, holding its
bytes; ``OutcomeUnknownError`` judged by the bytes stored) and gives a one-line minimal
counterexample; :class:`CounterReport` does the same for a compare-and-swap counter.
:func:`payload_for` is the bytes each racer writes, so that the stored bytes name their
writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CounterReport", "RaceReport", "payload_for"]


_CYCLE = bytes(range(251))


def payload_for(racer: str, size: int) -> bytes:
    """The bytes racer ``racer`` writes: its name, padded to ``size`` bytes (at least the name)."""
    head = f"{racer}|".encode()
    if size <= len(head):
        return head
    # Byte i of the padding is (len(racer) + i) % 251: a rotated cycle, built by repetition
    # so that multi-MiB payloads cost milliseconds.
    count = size - len(head)
    start = len(racer) % 251
    cycle = _CYCLE[start:] + _CYCLE[:start]
    return head + (cycle * (count // 251 + 1))[:count]


def _name_order(name: str) -> tuple[str, int]:
    """Sort ``racer-2`` before ``racer-11``."""
    stem, _, number = name.rpartition("-")
    return (stem, int(number)) if number.isdigit() else (name, -1)


def _first_error(errors: dict[str, str]) -> str:
    """``racer failed: the error``, for the racer whose error is a cause.

    One racer's failure breaks the shared barrier, so the others fail with
    ``BrokenBarrierError``: a consequence, shown only when nothing else failed.
    """
    name = min(errors, key=lambda n: ("BrokenBarrierError" in errors[n], _name_order(n)))
    return f"{name} failed: {errors[name].strip().splitlines()[-1]}"


@dataclass
class RaceReport:
    """What a put-if-absent race saw."""

    keys: list[str]
    racers: list[str]
    #: key → the racers whose call returned True.
    winners: dict[str, list[str]] = field(default_factory=dict)
    #: key → bytes read back after the race (None if the key is missing).
    stored: dict[str, bytes | None] = field(default_factory=dict)
    #: racer → the error that stopped it, as text.
    errors: dict[str, str] = field(default_factory=dict)
    payload_size: int = 16
    #: key → how many racers got an answer for it (won, lost or unknown).
    answered: dict[str, int] = field(default_factory=dict)
    #: key → the racers whose call raised ``OutcomeUnknownError``: their write may or may
    #: not be the one stored (the contract allows this after a lost response).
    unknown: dict[str, list[str]] = field(default_factory=dict)
    #: The longest any racer spent from the first start line to its last answer: the race
    #: itself, without starting threads or processes.
    racing_seconds: float = 0.0
    #: Wall time of the whole race, starting and joining the racers included.
    elapsed: float = 0.0

    @property
    def contested(self) -> int:
        """Keys that at least two racers claimed from one start line: the race's trials."""
        return sum(1 for key in self.keys if self.answered.get(key, 0) >= 2)

    def multiple_winners(self) -> dict[str, list[str]]:
        """Keys that more than one racer won."""
        return {k: w for k, w in self.winners.items() if len(w) > 1}

    def no_winner(self) -> list[str]:
        """Keys nobody won: no racer got ``True``, and no racer whose outcome is unknown
        holds the key either."""
        return [
            k
            for k in self.keys
            if not self.winners.get(k)
            and not any(
                self.stored.get(k) == payload_for(r, self.payload_size)
                for r in self.unknown.get(k, [])
            )
        ]

    def wrong_bytes(self) -> dict[str, str]:
        """Keys with one winner whose stored bytes are not that winner's payload."""
        bad: dict[str, str] = {}
        for key, won in self.winners.items():
            if len(won) == 1 and self.stored.get(key) != payload_for(won[0], self.payload_size):
                stored = self.stored.get(key)
                shown = "missing" if stored is None else repr(stored[:24])
                bad[key] = f"won by {won[0]}, but the store holds {shown}"
        return bad

    @property
    def ok(self) -> bool:
        """Exactly one winner per key, whose bytes are stored, and no racer failed."""
        return not (
            self.multiple_winners() or self.no_winner() or self.wrong_bytes() or self.errors
        )

    def counterexample(self) -> str | None:
        """A one-line minimal counterexample, e.g. ``key k7: 2 winners (racer-3, racer-11)``."""
        multiple = self.multiple_winners()
        if multiple:
            key = min(multiple, key=self.keys.index)
            names = sorted(multiple[key], key=_name_order)
            shown = ", ".join(names[:4]) + (f", ... +{len(names) - 4}" if len(names) > 4 else "")
            line = f"key {key.rsplit('/', 1)[-1]}: {len(names)} winners ({shown})"
            if len(self.keys) > 1:
                line += f"; {len(multiple)} of {len(self.keys)} keys had more than one winner"
            return line
        wrong = self.wrong_bytes()
        if wrong:
            key = min(wrong)
            return f"key {key.rsplit('/', 1)[-1]}: {wrong[key]}"
        # A racer that failed explains a key nobody won, so its error comes first.
        if self.errors:
            return _first_error(self.errors)
        missing = self.no_winner()
        if missing:
            return f"key {missing[0].rsplit('/', 1)[-1]}: no racer won it"
        return None


@dataclass
class CounterReport:
    """What a compare-and-swap counter race saw."""

    workers: int
    increments: int
    final: int | None
    #: worker → the error that stopped it, as text.
    errors: dict[str, str] = field(default_factory=dict)
    #: put_if_match calls that returned None (lost a race and retried).
    conflicts: int = 0

    @property
    def expected(self) -> int:
        """N × K."""
        return self.workers * self.increments

    @property
    def ok(self) -> bool:
        """The counter ended at exactly N × K and no worker failed."""
        return self.final == self.expected and not self.errors

    def counterexample(self) -> str | None:
        """One line describing the failure, or None."""
        if self.errors:
            return _first_error(self.errors)
        if self.final != self.expected:
            return (
                f"counter ended at {self.final}, expected {self.workers}×{self.increments}="
                f"{self.expected}: {self.expected - (self.final or 0)} increments lost"
            )
        return None
