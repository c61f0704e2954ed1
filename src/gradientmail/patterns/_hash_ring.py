"""A consistent-hash ring of learner ids: who among them answers for a name.

Every learner computes the same answer from the same ids without asking anyone, and a
learner that knows fewer ids than another answers for a superset of what it would answer
for knowing them all (the first id after a point among all ids is also the first among
any subset that holds it). Used to choose the watchers of a busy learner
(:mod:`gradientmail.patterns.shared_queue._idle_markers`) and the sweepers of a stretch of
units (:mod:`gradientmail.patterns.shared_queue._policy`); a learner's point also sets
where it starts in a shared order. This module is the one place ids are hashed: the ring's
points, the rendezvous ranks that elect a leader (:func:`rank`), and the seed of a
learner's own random choices (:func:`seed_of`).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Iterable

__all__ = ["Ring", "point", "rank", "seed_of"]


@functools.lru_cache(maxsize=1 << 16)
def point(name: str) -> int:
    """Where ``name`` sits on the ring: 64 bits of its BLAKE2b hash (remembered per name:
    a waiting learner places the same ids again at every change of the idle set)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def rank(salt: str, name: str) -> bytes:
    """``name``'s rendezvous rank under ``salt``: every learner ranks the same ids alike."""
    return hashlib.blake2b(f"{salt}\n{name}".encode(), digest_size=8).digest()


def seed_of(name: str) -> bytes:
    """The seed of ``name``'s own random choices (SHA-256 of the name)."""
    return hashlib.sha256(name.encode("utf-8")).digest()


class Ring:
    """The ids sorted by :func:`point`.

    Args:
        ids: the members; duplicates count once.
    """

    def __init__(self, ids: Iterable[str]) -> None:
        self._ring = sorted((point(name), name) for name in set(ids))

    def __len__(self) -> int:
        return len(self._ring)

    def successors(self, name: str, count: int) -> list[str]:
        """The ``count`` members that follow ``name``'s point (all of them, if fewer)."""
        ring = self._ring
        if len(ring) <= count:
            return [member for _, member in ring]
        at = bisect.bisect_right(ring, (point(name), ""))
        return [ring[(at + k) % len(ring)][1] for k in range(count)]
