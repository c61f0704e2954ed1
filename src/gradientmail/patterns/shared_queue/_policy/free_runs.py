"""The units a learner believes free, as runs of positions in its preference order.

A :class:`FreeRuns` marks units taken, never free again (with compare-and-swap a claim is
never deleted, so "taken" is never wrong), finds the runs of units still believed free in
time proportional to the runs rather than the units, and marks the claims of a page that
a :class:`PageReader` lists. Where to claim next is
:mod:`gradientmail.patterns.shared_queue._policy.claim_policy`'s business.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

__all__ = ["PAGE", "FreeRuns", "PageReader"]

#: Keys read by one partial listing: one page of S3, GCS and Azure.
PAGE = 1000


class PageReader(Protocol):
    """Reads the claims the policy asks for; the policy's only way to see the store.

    Attributes:
        partial: whether :meth:`page` lists from a key in one request (the store declares
            partial listings); without, a policy never reads pages.
    """

    partial: bool

    def page(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` claimed unit identifiers after ``after`` (``None``: from the
        first), in sorted order: one listing request."""

    def everything(self) -> list[str]:
        """Every claimed unit identifier: a full listing of the claims."""


class FreeRuns:
    """Which units of ``identifiers`` (a preference order) are believed taken.

    Args:
        identifiers: the preference order.
        seed: seeds :attr:`rng`, which draws among runs (see :meth:`pick_run`).
        weight: how much :meth:`pick_run` favours a run of a given length (default: the
            square of the length).
    """

    def __init__(
        self,
        identifiers: list[str],
        seed: bytes,
        weight: Callable[[int], int] | None = None,
    ) -> None:
        self.identifiers = identifiers
        self.weight: Callable[[int], int] = weight or _square
        #: Pages in one listing of the order.
        self.pages = -(-len(identifiers) // PAGE)
        self.position = dict(zip(identifiers, range(len(identifiers)), strict=True))
        self.taken = bytearray(len(identifiers))  # 1 = known claimed by someone
        self.rng = random.Random(seed)
        #: The order is the sorted order, so a listing page covers a contiguous stretch.
        self.sorted = len(self.position) == len(identifiers) and identifiers == sorted(identifiers)

    def mark(self, identifiers: Iterable[str]) -> None:
        """Mark ``identifiers`` as taken."""
        for ident in identifiers:
            p = self.position.get(ident)
            if p is not None:
                self.taken[p] = 1

    def exhausted(self) -> bool:
        """Whether every unit is believed taken (with compare-and-swap: is taken)."""
        return self.taken.find(0) < 0

    def largest_run(self) -> tuple[int, int] | None:
        """The largest run believed free (a blind jump's target)."""
        runs = self.runs()
        return max(runs, key=lambda run: run[1]) if runs else None

    def runs(self, first: int = 0, last: int | None = None) -> list[tuple[int, int]]:
        """``(start, length)`` of the runs believed free, cut to positions ``first..last``.

        Costs time in proportion to the runs in that stretch (``bytearray.find`` skips the
        taken positions in C), not to the number of units.
        """
        end = len(self.taken) if last is None else min(last + 1, len(self.taken))
        return list(self._iter_runs(first, end))

    def _iter_runs(self, first: int, end: int) -> Iterator[tuple[int, int]]:
        """``(start, length)`` of the runs believed free in positions ``first..end - 1``."""
        taken = self.taken
        p = taken.find(0, first, end)
        while p >= 0:
            stop = taken.find(1, p, end)
            stop = end if stop < 0 else stop
            yield p, stop - p
            p = taken.find(0, stop, end)

    def pick_run(
        self, within: tuple[int, int] | None = None, shortest: int = 1
    ) -> tuple[int, int] | None:
        """A run believed free, drawn with probability in proportion to its length squared.

        Learners that jump at the same moment with the same knowledge then spread over the
        free runs instead of all choosing the largest one, and still favour the long runs:
        a jump into a run costs about one lost claim whatever its length (the learner
        walking the run meets the jumper's first unit) and takes about half of the run, so a
        long run gives more work per lost claim, and fewer jumps follow (the cube bunches
        jumpers on the same runs; ``docs/shared-queue.md`` has the figures).

        With ``within=(first, last)``, only the parts of runs between those positions count;
        runs shorter than ``shortest`` do not.
        """
        runs = self.runs() if within is None else self.runs(*within)
        if shortest > 1:
            runs = [run for run in runs if run[1] >= shortest]
        if not runs:
            return None
        weights = [self.weight(length) for _, length in runs]
        point = self.rng.randrange(sum(weights))
        for run, weight in zip(runs, weights, strict=True):
            if point < weight:
                return run
            point -= weight
        return runs[-1]  # pragma: no cover - the draw is below the total

    def run_after(self, last: int, shortest: int = 1) -> tuple[int, int] | None:
        """The first run believed free after position ``last``, wrapping to the front.

        Runs shorter than ``shortest`` do not count.
        """
        around = itertools.chain(
            self._iter_runs(last + 1, len(self.taken)), self._iter_runs(0, last + 1)
        )
        return next((run for run in around if run[1] >= shortest), None)

    def list_page(self, reader: PageReader, start: int) -> int:
        """Mark the claims on one page that ``reader`` lists from position ``start``; the
        last position the page covers."""
        page = reader.page(self.identifiers[start - 1] if start > 0 else None, PAGE)
        taken = self.taken
        for p in map(self.position.get, page):
            if p is not None:
                taken[p] = 1
        if len(page) < PAGE:
            return len(self.identifiers) - 1  # the listing reached the end
        # A full page: it covers up to its last key (a key outside the order covers
        # nothing past the start).
        last = self.position.get(page[-1])
        return last if last is not None else start


def _square(length: int) -> int:
    return length * length
