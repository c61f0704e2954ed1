"""file:// deletes take no lock, yet never land inside a swap; creates survive pruned folders.

A swap reads the key's version and then renames its value into place, holding the key's
lock; ``delete`` and ``put_if_absent`` take none. Each test builds one interleaving on
purpose: a hook on the system call at a chosen point inside a swap (just before it places
its value, or before it announces itself) runs the competing calls to completion on other
handles, and the outcome must be one a linearizable store could give: a swap whose key was
deleted meanwhile changes nothing and returns ``None``, and a create that returned
``True`` keeps its bytes.

Processes stopped with SIGSTOP show what waits for what: a swap stopped before placing its
value holds its key's lock, yet deletes and creates of that key go on; a delete stopped
half-way holds nothing. The second half is the folders: a delete removes the folders its
key leaves empty, and a create whose folder was removed under it makes it again.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gradientmail import KeyNotFoundError, Version
from gradientmail.backends import _local_layout as local_layout
from gradientmail.backends import _local_swaps as local_swaps
from gradientmail.backends.local import FileMailbox
from tests.support.pausing import stopped
from tests.support.polling import wait_until

pytestmark = pytest.mark.timeout(120)

KEY = "heads/model"
LEAF = local_layout.encode(KEY)[1]
#: Seconds a call that must not wait is given (it takes milliseconds), or a process to stop.
JOIN = 10.0
CTX = mp.get_context("spawn")


def _run(call: Callable[[], Any]) -> Any:
    """``call()`` in a thread of its own; fails if it has not returned within JOIN s."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(JOIN)
    assert not thread.is_alive(), "the call waited: it should hold nothing and need nothing"
    assert result, "the call raised (see the thread's traceback above)"
    return result[0]


def _value(box: FileMailbox) -> bytes | None:
    try:
        return box.get(KEY)
    except KeyNotFoundError:
        return None


def _hook(
    monkeypatch: pytest.MonkeyPatch, name: str, when: Callable[..., bool], then: Callable[[], None]
) -> threading.Event:
    """Run ``then()`` once, in this thread, just before its first ``os.<name>`` call that
    ``when(*args)`` picks; return the event set once it ran."""
    me, fired = threading.get_ident(), threading.Event()
    real = getattr(os, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me and not fired.is_set() and when(*args):
            fired.set()
            then()
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, call)
    return fired


def _placing(_src: Any, dst: Any, *_: Any) -> bool:
    return bool(dst == LEAF)


def _announcing(name: Any, *_: Any) -> bool:
    return str(name).startswith(local_swaps.PREFIX)


@pytest.fixture
def boxes(tmp_root: str) -> tuple[FileMailbox, FileMailbox]:
    """Ours, and another handle on the same directory for the competing calls."""
    return FileMailbox(tmp_root), FileMailbox(tmp_root)


@pytest.fixture
def swapping(boxes: tuple[FileMailbox, FileMailbox]) -> tuple[FileMailbox, FileMailbox, Version]:
    """``boxes``, with ``KEY`` written and the version a swap of it starts from."""
    box, other = boxes
    box.put(KEY, b"before")
    return box, other, box.get_versioned(KEY)[1]


# -- a delete against a swap of the same key ------------------------------------------------------


@pytest.mark.parametrize("sibling", [False, True], ids=["alone", "beside-a-sibling"])
def test_a_delete_inside_a_swap_makes_it_read_again_and_fail(
    swapping: tuple[FileMailbox, FileMailbox, Version],
    monkeypatch: pytest.MonkeyPatch,
    sibling: bool,
) -> None:
    # Beside a sibling the key's folder outlives the delete: alone, the folder's removal
    # would fail the swap's rename by itself, whether or not the delete cancelled the swap.
    box, other, version = swapping
    if sibling:
        box.put(KEY + "-sibling", b"stays")
    fired = _hook(monkeypatch, "rename", _placing, lambda: _run(lambda: other.delete(KEY)))
    swapped = box.put_if_match(KEY, b"swapped", version)
    monkeypatch.undo()
    assert fired.is_set(), "the interleaving was not reached"
    assert swapped is None, "a swap placed its value over a key deleted after its read"
    assert _value(box) is None


@pytest.mark.parametrize("sibling", [False, True], ids=["alone", "beside-a-sibling"])
def test_a_delete_then_a_create_inside_a_swap_keep_the_created_bytes(
    swapping: tuple[FileMailbox, FileMailbox, Version],
    monkeypatch: pytest.MonkeyPatch,
    sibling: bool,
) -> None:
    box, other, version = swapping
    if sibling:  # the key's folder outlives the delete (see the test above)
        box.put(KEY + "-sibling", b"stays")
    created: list[bool] = []

    def delete_then_create() -> None:
        _run(lambda: other.delete(KEY))
        created.append(_run(lambda: other.put_if_absent(KEY, b"created")))

    fired = _hook(monkeypatch, "rename", _placing, delete_then_create)
    swapped = box.put_if_match(KEY, b"swapped", version)
    monkeypatch.undo()
    assert fired.is_set(), "the interleaving was not reached"
    assert created == [True]
    assert swapped is None
    assert box.get(KEY) == b"created", "a create that returned True lost its bytes to a swap"


def test_a_delete_and_a_create_before_a_swap_announces_itself_make_it_fail(
    swapping: tuple[FileMailbox, FileMailbox, Version], monkeypatch: pytest.MonkeyPatch
) -> None:
    box, other, version = swapping

    def delete_then_create() -> None:
        other.delete(KEY)
        assert other.put_if_absent(KEY, b"created")

    fired = _hook(monkeypatch, "mkdir", _announcing, delete_then_create)
    swapped = box.put_if_match(KEY, b"swapped", version)
    monkeypatch.undo()
    assert fired.is_set(), "the interleaving was not reached"
    assert swapped is None, "a swap trusted a read made before it announced itself"
    assert box.get(KEY) == b"created"


# -- stopped and killed processes -----------------------------------------------------------------


def swap_stopping_before_it_places(root: str, token: str, out: Any) -> None:
    """In another process: swap ``KEY`` from version ``token``, stopping (SIGSTOP) just
    before the value is placed (the key's lock held, the swap announced); report the result."""
    real = os.rename

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if dst == LEAF:
            os.rename = real
            os.kill(os.getpid(), signal.SIGSTOP)
        real(src, dst, *args, **kwargs)

    box = FileMailbox(root)
    os.rename = rename
    swapped = box.put_if_match(KEY, b"swapped", Version(token))
    out.put(None if swapped is None else swapped.token)


def test_deletes_and_creates_of_a_key_go_on_while_its_swap_is_stopped(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    box.put(KEY, b"before")
    _, version = box.get_versioned(KEY)
    out = CTX.Queue()
    swapper = CTX.Process(
        target=swap_stopping_before_it_places, args=(tmp_root, version.token, out)
    )
    swapper.start()
    try:
        wait_until(lambda: stopped(swapper.pid or 0), JOIN, "the swap to stop before placing")
        _run(lambda: box.delete(KEY))
        assert _value(box) is None
        assert _run(lambda: box.put_if_absent(KEY, b"created")) is True
    finally:
        os.kill(swapper.pid or 0, signal.SIGCONT)
    assert out.get(timeout=JOIN) is None, "the stopped swap placed its value after the delete"
    swapper.join(JOIN)
    assert swapper.exitcode == 0
    assert box.get(KEY) == b"created"


def delete_stopping_half_way(root: str) -> None:
    """In another process: delete ``KEY``, stopping (SIGSTOP) right after its file is moved
    out of the key's folder (or, where a delete unlinks it, right after the unlink)."""
    real_rename, real_unlink = os.rename, os.unlink

    def stop() -> None:
        os.rename, os.unlink = real_rename, real_unlink
        os.kill(os.getpid(), signal.SIGSTOP)

    def rename(src: Any, *args: Any, **kwargs: Any) -> None:
        real_rename(src, *args, **kwargs)
        if src == LEAF:
            stop()

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        real_unlink(path, *args, **kwargs)
        if path == LEAF:
            stop()

    box = FileMailbox(root)
    os.rename, os.unlink = rename, unlink  # type: ignore[assignment]
    box.delete(KEY)


def test_a_delete_stopped_half_way_holds_up_no_write_of_its_key(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    box.put(KEY, b"before")
    deleter = CTX.Process(target=delete_stopping_half_way, args=(tmp_root,))
    deleter.start()
    try:
        wait_until(lambda: stopped(deleter.pid or 0), JOIN, "the delete to stop half-way")
        assert _value(box) is None
        assert _run(lambda: box.put_if_absent(KEY, b"created")) is True
        _, version = box.get_versioned(KEY)
        assert _run(lambda: box.put_if_match(KEY, b"swapped", version)) is not None
        _run(lambda: box.delete(KEY))
        _run(lambda: box.put(KEY, b"put"))
    finally:
        os.kill(deleter.pid or 0, signal.SIGCONT)
    deleter.join(JOIN)
    assert deleter.exitcode == 0
    assert box.get(KEY) == b"put", "the resumed delete removed a later write"


def test_a_delete_that_takes_the_name_of_a_swaps_empty_announcement_makes_the_swap_read_again(
    swapping: tuple[FileMailbox, FileMailbox, Version], monkeypatch: pytest.MonkeyPatch
) -> None:
    box, _, version = swapping
    root = box.root
    deleter = CTX.Process(target=delete_stopping_half_way, args=(root,))

    def delete_stopping_with_its_file_at_the_name() -> None:
        # The swap made its announcement, not yet opened nor linked: the delete removes it
        # while it is empty, moves the key's file to that name and stops there.
        deleter.start()
        wait_until(lambda: stopped(deleter.pid or 0), JOIN, "the delete to stop half-way")

    fired = _hook(monkeypatch, "open", _announcing, delete_stopping_with_its_file_at_the_name)
    try:
        swapped = box.put_if_match(KEY, b"swapped", version)
    finally:
        monkeypatch.undo()
        if deleter.pid is not None:
            os.kill(deleter.pid, signal.SIGCONT)
            deleter.join(JOIN)
    assert fired.is_set(), "the interleaving was not reached"
    assert swapped is None
    assert _value(box) is None
    assert deleter.exitcode == 0


def swap_dying_before_it_places(root: str, token: str) -> None:
    """In another process: swap ``KEY`` from ``token`` and block just before placing the
    value, announced, until killed."""
    never, _ = os.pipe()
    real = os.rename

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if dst == LEAF:
            os.read(never, 1)  # killed here
        real(src, dst, *args, **kwargs)

    box = FileMailbox(root)
    os.rename = rename
    box.put_if_match(KEY, b"never placed", Version(token))


def test_what_a_killed_swap_left_is_swept_at_open_and_cleared_by_the_next_swap(
    tmp_root: str,
) -> None:
    box = FileMailbox(tmp_root)
    box.put(KEY, b"before")
    _, version = box.get_versioned(KEY)
    staging = Path(tmp_root, ".tmp")
    announced = staging / local_swaps.announcement(KEY)
    for then in ("open", "swap"):
        swapper = CTX.Process(target=swap_dying_before_it_places, args=(tmp_root, version.token))
        swapper.start()
        try:
            wait_until(announced.exists, JOIN, "the swap to announce itself")
        finally:
            swapper.kill()
            swapper.join(JOIN)
        if then == "open":
            FileMailbox(tmp_root)  # opening sweeps .tmp
            assert os.listdir(staging) == []
        else:
            new = _run(lambda: box.put_if_match(KEY, b"swapped", version))
            assert new is not None, "a dead swap's announcement stopped the next swap"
            assert box.get(KEY) == b"swapped"
            assert not announced.exists()


# -- folders ---------------------------------------------------------------------------------


def _folders(root: str) -> list[str]:
    """Every folder below ``root`` but the store's own, relative to it."""
    return sorted(
        str(path.relative_to(root))
        for path in Path(root).rglob("*")
        if path.is_dir() and path.relative_to(root).parts[0] not in (".tmp", ".locks")
    )


def test_a_delete_removes_the_folders_its_key_leaves_empty_and_no_other(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    for key in ("a/b/c", "a/b/d", "a/e", "x" * 300 + "/k"):
        box.put(key, b"1")
    box.delete("a/b/c")
    assert _folders(tmp_root) == ["a.d", "a.d/b.d", "x" * 240 + ".c", f"{'x' * 240}.c/{'x' * 60}.d"]
    box.delete("a/b/d")
    box.delete("x" * 300 + "/k")
    assert _folders(tmp_root) == ["a.d"]
    box.delete("a/e")
    assert _folders(tmp_root) == []
    assert sorted(os.listdir(tmp_root)) == [".locks", ".tmp"]
    assert os.listdir(Path(tmp_root, ".tmp")) == []


@pytest.mark.parametrize("write", ["put_if_absent", "put"])
def test_a_create_whose_folder_is_removed_just_before_it_places_its_value_still_lands(
    boxes: tuple[FileMailbox, FileMailbox], monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    box, other = boxes
    other.put("runs/1/other", b"the folder's last key")
    leaf = local_layout.encode("runs/1/mine")[1]
    folder = Path(box.root, "runs.d", "1.d")

    def empty_the_folder() -> None:
        other.delete("runs/1/other")
        assert not folder.exists(), "the folder was not removed with its last key"

    fired = _hook(
        monkeypatch,
        "link" if write == "put_if_absent" else "rename",
        lambda _src, dst, *_: dst == leaf,
        empty_the_folder,
    )
    if write == "put_if_absent":
        assert box.put_if_absent("runs/1/mine", b"mine") is True
    else:
        box.put("runs/1/mine", b"mine")
    monkeypatch.undo()
    assert fired.is_set(), "the interleaving was not reached"
    assert box.get("runs/1/mine") == b"mine"
    assert list(box.list()) == ["runs/1/mine"]


def test_a_create_whose_parent_folder_is_removed_before_it_makes_a_subfolder_still_lands(
    boxes: tuple[FileMailbox, FileMailbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    box, other = boxes
    other.put("runs/other", b"the folder's last key")
    folder = Path(box.root, "runs.d")

    def empty_the_folder() -> None:
        other.delete("runs/other")
        assert not folder.exists(), "the folder was not removed with its last key"

    fired = _hook(monkeypatch, "mkdir", lambda name, *_: name == "1.d", empty_the_folder)
    assert box.put_if_absent("runs/1/mine", b"mine") is True
    monkeypatch.undo()
    assert fired.is_set(), "the interleaving was not reached"
    assert box.get("runs/1/mine") == b"mine"
