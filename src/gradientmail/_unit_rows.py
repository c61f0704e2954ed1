"""What a learner's progress record says about each unit: :class:`UnitRow`, and its codec.

A learner's record (``learners/{id}``, written by its
:class:`~gradientmail.session.Session`) lists one row per unit the learner took: when it
was claimed, when its first item reached the training loop, when the loop took its last,
whether it was taken over from another learner, and its epoch. A long run's record holds
thousands of rows, so each is stored compactly, as a JSON array
``[identifier, claimed, started, finished, reclaimed, epoch]``. This module is the one
place that knows those positions: the session encodes its rows here, and ``gradientmail
status``, its plot and a resuming session decode them here.

Rows written by older versions lack the trailing fields (``reclaimed``, then ``epoch``):
they decode as not taken over, in epoch 0. A time that is not a number decodes as
``None`` (not yet), and an entry that is not a row at all is skipped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["UnitRow", "decode_rows"]

#: The fields a stored row must have; the later ones were added by later versions.
_REQUIRED = 4


class UnitRow(NamedTuple):
    """One unit in a learner's progress record (times are ``time.time()`` seconds).

    A named tuple: fields by name, and by position in the stored order.
    """

    #: The unit's identifier.
    identifier: str
    #: When this learner claimed it (or took it over).
    claimed: float | None
    #: When its first item reached the training loop; ``None``: not yet.
    started: float | None
    #: When the training loop took its last item; ``None``: not yet.
    finished: float | None
    #: Whether it was taken over from another learner (or an earlier incarnation).
    reclaimed: bool = False
    #: The epoch it belongs to.
    epoch: int = 0

    @property
    def began(self) -> float | None:
        """When it began, as a chart draws it: its first item, else its claim."""
        return self.started if self.started is not None else self.claimed

    def encode(self) -> list[Any]:
        """The row as stored: a JSON array in the fields' order."""
        return list(self)

    @classmethod
    def decode(cls, raw: object) -> UnitRow | None:
        """A stored row (of this version or an older one); ``None`` when ``raw`` is none."""
        if not isinstance(raw, (list, tuple)) or len(raw) < _REQUIRED:
            return None
        identifier, claimed, started, finished = raw[:_REQUIRED]
        reclaimed = bool(raw[4]) if len(raw) > 4 else False
        epoch = raw[5] if len(raw) > 5 and _integer(raw[5]) else 0
        return cls(
            str(identifier), _time(claimed), _time(started), _time(finished), reclaimed, epoch
        )


def decode_rows(raw: object) -> list[UnitRow]:
    """Every row of a record's ``units`` value that decodes, in order; ``[]`` for no list."""
    if not isinstance(raw, list):
        return []
    rows = (UnitRow.decode(entry) for entry in raw)
    return [row for row in rows if row is not None]


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _time(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None
