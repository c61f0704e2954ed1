"""Is a history of calls on one key linearizable? A Wing-Gong search over a register model.

Each call is recorded with the system-wide monotonic clock at its start and end (the same
clock in every process on Linux). The search orders the calls as a one-key store could have
run them one at a time, each inside its own interval, with the results observed: a
``put_if_absent`` wins exactly when the key is absent, a ``get`` sees the current value, a
compare-and-swap wins exactly when the key holds the value its version was read with, and
a ``delete`` always empties the key. Every written value is unique, so a value names a
write.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Call:
    """One call on the key: ``op`` is ``"create"``, ``"delete"``, ``"get"`` or ``"swap"``.

    ``value`` is what a create or swap wrote, ``expected`` the value a swap's version was
    read with; ``result`` is a create's or swap's win, or what a get saw (``None``: absent).
    """

    start: int
    end: int
    op: str
    result: object = None
    value: bytes | None = None
    expected: bytes | None = None


def _step(call: Call, state: bytes | None) -> tuple[bool, bytes | None]:
    """Whether ``call`` could have returned its result from ``state``, and the state after."""
    if call.op == "create":
        return (state is None) == call.result, call.value if state is None else state
    if call.op == "delete":
        return True, None
    if call.op == "get":
        return call.result == state, state
    wins = state == call.expected
    return wins == call.result, call.value if wins else state


def linearizable(calls: list[Call], initial: bytes | None = None) -> bool:
    """Whether some order of ``calls``, each inside its interval, explains every result."""
    ordered = sorted(calls, key=lambda call: call.start)
    everything = (1 << len(ordered)) - 1

    @cache
    def search(done: int, state: bytes | None) -> bool:
        if done == everything:
            return True
        pending = [i for i in range(len(ordered)) if not done >> i & 1]
        first_end = min(ordered[i].end for i in pending)
        for i in pending:
            if ordered[i].start > first_end:
                break  # it began after a pending call ended: that one goes first
            fits, after = _step(ordered[i], state)
            if fits and search(done | 1 << i, after):
                return True
        return False

    return search(0, initial)
