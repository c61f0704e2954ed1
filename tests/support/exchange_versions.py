"""Versions of a shared model written straight through its store, as learners' exchanges do.

For tests and benchmarks about what the store holds after many versions, without training:
each version is the exchange's own sequence of calls (``SharedStore``): its fragments, a
swap of the head, then the fragments of a lost swap, or of the version that left the
history, deleted (and every 16th version the orphans swept).
"""

from __future__ import annotations

import threading

import torch

from gradientmail import Mailbox
from gradientmail._exchange.layout import Head, Keys
from gradientmail._exchange.store import SharedStore
from gradientmail._exchange.tensors import WIRE_DTYPES, State


def shared_store(box: Mailbox, keep: int, fragment_bytes: int = 8) -> SharedStore:
    """The store of shared model ``model`` in ``box``, with its version 0 (4 values, in two
    fragments of the default 8 bytes)."""
    store = SharedStore(box, Keys("model"), WIRE_DTYPES["float32"], fragment_bytes, keep)
    token, count, *_ = store.write_state(0, _state(torch.zeros(4)))
    assert store.create_head(Head(0, token, count, [[0, token, count]]))
    return store


def _state(values: torch.Tensor) -> State:
    """A version of ``values`` and no integer buffers."""
    return State(values, torch.zeros(0, dtype=torch.int64))


def write_versions(store: SharedStore, until: int) -> None:
    """Write versions until the head reaches version ``until``."""
    values = torch.arange(4, dtype=torch.float32)
    while True:
        got = store.read_head()
        assert got is not None
        head, expected = got
        if head.version >= until:
            return
        version = head.version + 1
        token, count, *_ = store.write_state(version, _state(values))
        history, gone = store.next_history(head, version, token, count)
        new = Head(version, token, count, history)
        if store.swap_head(new, expected) is None:
            store.delete_data(token, count)
        else:
            store.collect(new, gone)


def write_versions_in_threads(store: SharedStore, until: int, writers: int) -> None:
    """:func:`write_versions` in ``writers`` threads at once, until the head reaches ``until``."""
    threads = [threading.Thread(target=write_versions, args=(store, until)) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
