"""``put_if_absent`` is one atomic step: a create by another client never slips inside it.

A race test finds a check-then-write create only when the scheduler happens to switch
threads between the check and the write. These tests make that switch happen every time:
at the one point inside our ``put_if_absent`` where a non-atomic create would be between its
check and its write (memory://: the first time our call releases the store's lock;
file://: just before our value is placed under its name), another thread runs a complete
``put_if_absent`` of the same key on its own handle. An atomic create has already decided
by then, or decides after; either way exactly one of the two wins, and the store holds the
winner's bytes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from gradientmail import Mailbox
from gradientmail.backends import _local_layout as local_layout
from gradientmail.backends.memory import MemoryMailbox
from tests.support.rigs import Rig

KEY = "claims/unit-1"
JOIN = 30.0


class Competitor:
    """Runs ``box.put_if_absent(KEY, b"theirs")`` to completion in its own thread, once."""

    def __init__(self, box: Mailbox) -> None:
        self.box = box
        self.won: bool | None = None
        self.ran = False

    def __call__(self) -> None:
        self.ran = True

        def create() -> None:
            self.won = self.box.put_if_absent(KEY, b"theirs")

        thread = threading.Thread(target=create, name="competitor")
        thread.start()
        thread.join(JOIN)
        assert not thread.is_alive(), "the competing create hung"


def _assert_one_winner(mine: bool, competitor: Competitor, box: Mailbox) -> None:
    assert competitor.ran, "the interleaving was not reached"
    assert competitor.won is not None
    assert [mine, competitor.won].count(True) == 1, (
        f"ours won: {mine}, theirs won: {competitor.won}: a create must have one winner"
    )
    assert box.get(KEY) == (b"mine" if mine else b"theirs"), "the store holds the winner's bytes"


class ReleaseHook:
    """Wraps a store lock: after ``thread`` first releases it, ``hook()`` runs."""

    def __init__(self, inner: Any, thread: int, hook: Callable[[], None]) -> None:
        self.inner = inner
        self.thread = thread
        self.hook = hook
        self.fired = False

    def __enter__(self) -> ReleaseHook:
        self.inner.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.release()
        if threading.get_ident() == self.thread and not self.fired:
            self.fired = True
            self.hook()


def test_memory_a_create_between_our_lock_holds_cannot_also_win(rig_memory: Rig) -> None:
    box = rig_memory.fresh()
    assert isinstance(box, MemoryMailbox)
    competitor = Competitor(MemoryMailbox(box.name))  # another handle on the same store
    store = box._store
    store.lock = ReleaseHook(store.lock, threading.get_ident(), competitor)  # type: ignore[assignment]
    mine = box.put_if_absent(KEY, b"mine")
    _assert_one_winner(mine, competitor, box)


def test_file_a_create_just_before_our_value_is_placed_cannot_also_win(
    rig_file: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = rig_file.url()
    box = rig_file.open(url)
    competitor = Competitor(rig_file.open(url))  # another handle on the same directory
    leaf = local_layout.encode(KEY)[1]
    me = threading.get_ident()
    fired = threading.Event()

    def before_placing(real: Callable[..., None]) -> Callable[..., None]:
        def place(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            # Our value is about to get its name: let the whole competing create run first.
            if dst == leaf and threading.get_ident() == me and not fired.is_set():
                fired.set()
                competitor()
            real(src, dst, *args, **kwargs)

        return place

    monkeypatch.setattr(os, "link", before_placing(os.link))
    monkeypatch.setattr(os, "rename", before_placing(os.rename))
    mine = box.put_if_absent(KEY, b"mine")
    monkeypatch.undo()
    _assert_one_winner(mine, competitor, box)
