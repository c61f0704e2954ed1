"""Compare-and-swap on ``file://`` against deletes that take no lock.

A swap reads the key's version, then renames its new value over the key's file. The key's
lock stripe keeps other swaps and ``put`` out of that window, but ``delete`` and
``put_if_absent`` take no lock (a process stopped inside a locked call holds up every other
caller of that stripe until it continues). Without more, a delete landing between the read
and the rename would be undone by the rename, and a delete then a create there would be
overwritten, by a swap that should have failed. Instead, a swap and a delete of one key
meet at one name, ``.tmp/swap-<digest of the key>``:

* A swap *announces* itself there before it reads (:func:`swap`): it makes that directory
  and links its staged value into it. It places the value by renaming that link over the
  key's file, so once the link is gone the swap can no longer place anything; it then
  reads the key again under a new announcement.
* A delete *moves* the key's file to that name, then unlinks it (:func:`delete`). The system
  refuses to rename a file over a directory, so no delete lands while a swap is announced.
  A delete that meets an announcement *cancels* it (unlinks the link, removes the directory)
  and moves the file then. The swap's rename, if it comes after, finds no link and reads
  again; if it came first, the delete removes the swapped value.

So between a swap's read and its rename the key cannot change: a delete would first have
to cancel the swap, and a create needs the key absent. Every swap is linearizable against
deletes and creates; no delete ever waits, even for a swap whose process is stopped; and
only a process stopped inside a swap holds anyone up (the other swaps and ``put``\\ s of its
lock stripe). What a deleter moved away and did not unlink yet (it was killed, or is
stopped) is an ordinary file: the next delete renames over it, a swap removes it before
announcing, and the staging sweep removes it when a mailbox opens. :func:`sweep` removes
the announcements of dead swaps then too.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable

from gradientmail.backends._local_fs import open_dir

__all__ = ["ATTEMPTS", "PREFIX", "announcement", "delete", "swap", "sweep"]

#: What an announcement's name (and a deleter's moved file) starts with, in ``.tmp``.
PREFIX = "swap-"
#: Tries before a swap or delete of a key gives up on the other side taking the name.
ATTEMPTS = 1000
#: What a rename of a file over a directory fails with (``EISDIR``; the others, elsewhere).
_OVER_A_DIRECTORY = (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST)


def announcement(key: str) -> str:
    """The name in ``.tmp`` where swaps and deletes of ``key`` meet."""
    return PREFIX + hashlib.blake2b(key.encode("utf-8"), digest_size=16).hexdigest()


def swap(
    staging: int, name: str, staged: str, matches: Callable[[], bool], place: Callable[[int], None]
) -> bool:
    """Place the staged value if ``matches()`` holds; the caller holds the key's lock.

    ``staged`` is a staged file in ``staging``; ``matches()`` reads the key and says whether
    it holds the expected version; ``place(fd)`` renames ``staged`` from the directory ``fd``
    over the key's file, raising ``FileNotFoundError`` if it is no longer there. Returns
    whether the value was placed: ``False`` exactly when ``matches()`` said no, with the
    announcement in place, so the key was not changed in between.

    Raises:
        OSError: the announcement could not be made or kept (``filename`` is its name).
    """
    for _ in range(ATTEMPTS):
        fd = _announce(staging, name, staged)
        try:
            if not matches():
                return False
            try:
                place(fd)
            except FileNotFoundError:
                continue  # a delete cancelled this announcement: read again
            return True
        finally:
            _withdraw(staging, name, fd, staged)
    raise OSError(errno.EAGAIN, "deletes of the key kept cancelling the swap", name)


def delete(parent: int, leaf: str, staging: int, name: str) -> bool:
    """Delete ``leaf`` from ``parent`` holding no lock; whether there was one to delete.

    A swap of the key announced at ``name`` is cancelled first (see the module docstring).

    Raises:
        IsADirectoryError: ``leaf`` is a directory (``filename`` is ``leaf``).
        OSError: the move failed (``filename`` is ``leaf``), or swaps announced themselves
            every time (``filename`` is ``name``).
    """
    for _ in range(ATTEMPTS):
        try:
            mode = os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(mode):  # not a value: moving it into .tmp would hide it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), leaf)
        try:
            os.rename(leaf, name, src_dir_fd=parent, dst_dir_fd=staging)
        except FileNotFoundError:
            return False  # deleted since
        except OSError as exc:
            if exc.errno not in _OVER_A_DIRECTORY:
                raise
            _cancel(staging, name)  # a swap of this key is announced
            continue
        try:
            os.unlink(name, dir_fd=staging)
        except OSError:
            pass  # removed by a swap or another delete already, or a swap announced since
        return True
    raise OSError(errno.EAGAIN, "a swap of the key was announced every time", name)


def sweep(staging: int) -> None:
    """Cancel every announcement in ``staging`` (when a mailbox opens).

    Those of dead swaps go; a live swap, if any, reads again under a new one.
    """
    listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=staging)
    try:
        with os.scandir(listing) as entries:
            names = [
                entry.name
                for entry in entries
                if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False)
            ]
    finally:
        os.close(listing)
    for name in names:
        _cancel(staging, name)


def _announce(staging: int, name: str, staged: str) -> int:
    """Make the announcement ``name`` holding a link to ``staged``; return its descriptor."""
    for _ in range(ATTEMPTS):
        try:
            os.mkdir(name, 0o755, dir_fd=staging)
        except FileExistsError:
            _clear(staging, name)  # a deleter's moved file, or a dead swap's announcement
            continue
        try:
            fd = open_dir(name, staging)
        except (FileNotFoundError, NotADirectoryError):
            continue  # cancelled at once, while empty (and the key's file moved there since)
        try:
            os.link(staged, staged, src_dir_fd=staging, dst_dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)  # cancelled while empty, before the link: make it again
            continue
        except BaseException:
            os.close(fd)
            _rmdir(staging, name)
            raise
        return fd
    raise OSError(errno.EAGAIN, "deletes of the key kept cancelling the swap", name)


def _withdraw(staging: int, name: str, fd: int, staged: str) -> None:
    try:
        os.unlink(staged, dir_fd=fd)
    except FileNotFoundError:
        pass  # placed, or cancelled
    finally:
        os.close(fd)
    _rmdir(staging, name)


def _clear(staging: int, name: str) -> None:
    """Remove whatever is at ``name``: the caller holds the key's lock, so no live swap."""
    try:
        os.unlink(name, dir_fd=staging)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError):  # a directory: Linux says EISDIR, others EPERM
        _cancel(staging, name)


def _cancel(staging: int, name: str) -> None:
    """Unlink what the announcement ``name`` holds, so its swap cannot place it; remove it."""
    try:
        fd = open_dir(name, staging)
    except (FileNotFoundError, NotADirectoryError):
        return  # withdrawn already, or a deleter's moved file now
    try:
        listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
        try:
            with os.scandir(listing) as entries:
                held = [entry.name for entry in entries]
        finally:
            os.close(listing)
        for entry in held:
            try:
                os.unlink(entry, dir_fd=fd)
            except FileNotFoundError:
                pass  # placed or withdrawn meanwhile
    finally:
        os.close(fd)
    _rmdir(staging, name)


def _rmdir(staging: int, name: str) -> None:
    try:
        os.rmdir(name, dir_fd=staging)
    except OSError:
        pass  # gone, not empty (announced again), or a deleter's file: kept
