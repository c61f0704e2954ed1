"""When a unit whose last item the consumer took may be recorded done: the completion gate.

A queue is built with one gate, a strategy it never changes. By default it is
:data:`IMMEDIATELY`: each unit is recorded done as soon as the consumer took its last item.
A consumer that hands the items on to someone who may still lose them (torch's DataLoader,
whose worker queues drop batches when the loop leaves early) builds its queue with a gate
of its own, which opens for a unit once its items are safe downstream, or says they never
will be (then the unit stays held, to be released). Such a gate has ``slack``: the units
whose completions may wait for it, which the loader may hold beyond its prefetch so that
waiting completions never stall it, and whose last completions the queue records when it
closes rather than when its iteration ends (the items may still be downstream then).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["IMMEDIATELY", "CompletionGate", "Immediately"]


class CompletionGate(Protocol):
    """When a unit whose items were all taken may be recorded done."""

    @property
    def slack(self) -> int:
        """The most units whose completions may wait for this gate (0: none ever waits)."""

    def mark(self) -> int:
        """Called in the consumer's thread when a unit's last item was taken: the mark
        :meth:`wait` is given for that unit."""

    def wait(self, mark: int) -> bool:
        """Called in the recorder's thread: ``True`` once every item taken up to ``mark``
        is safe downstream; ``False`` once it never will be (they were dropped)."""


class Immediately:
    """The default gate: a unit is recorded done as soon as the consumer took its last item."""

    slack = 0

    def mark(self) -> int:
        return 0

    def wait(self, mark: int) -> bool:
        return True


IMMEDIATELY = Immediately()
