"""Staged files for the ``file://`` backend: written whole and locked, swept when orphaned.

A value is written to a staged file in ``.tmp/`` before it is linked or renamed into
place. :func:`stage` locks the file before writing it (on Linux, before it even has a
name), and :func:`sweep_staging` removes only staged files whose lock it can take. So a
live writer's file survives a sweep from any process, whatever PID namespace or host it
runs in, while a dead writer's lock is released by the kernel and its debris goes at the
next sweep. Locking descriptors are opened with :func:`~gradientmail.backends._local_fs.open_held`,
so a forked child never inherits a writer's lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Sequence

from gradientmail.backends._local_fs import O_DIR, O_FILE, close_held, open_held

__all__ = ["discard_staged", "stage", "sweep_staging"]

#: Tries to create a staged file by name that a concurrent sweep does not remove first.
_STAGE_ATTEMPTS = 5
#: How long the sweep gives the writer of an empty, unlocked staged file to lock it (s).
_EMPTY_RECHECK = 0.01
#: Unnamed files (Linux): 0 where the platform has none.
_TMPFILE = getattr(os, "O_TMPFILE", 0)
#: An unnamed file is given its name through /proc.
_PROC_FD = os.path.isdir("/proc/self/fd")

_staging_here: set[str] = set()  # staged names this process is writing
# A forked child writes none of them: the threads writing them live on in the parent only.
os.register_at_fork(after_in_child=_staging_here.clear)


def stage(staging: int, stem: str, parts: Sequence[bytes], *, fsync: bool) -> tuple[str, int]:
    """Write ``parts`` to a new staged file in ``staging``; return its name and descriptor.

    The file comes back whole (fsynced with ``fsync``), named ``stem`` (unique) or a
    variant of it, and locked; release it with :func:`discard_staged`. Where the system
    allows, it is created without a name (``O_TMPFILE``), locked and written, and only then
    linked into ``staging``: no sweep ever sees it unlocked, and a crash leaves nothing.
    Elsewhere (no ``O_TMPFILE`` or no ``/proc``, e.g. NFS or macOS) it is created by name
    and locked at once; a sweep that finds it in the instant between sees an empty file and
    gives its writer a moment to lock it. Should a sweep remove it all the same (this
    writer stalled longer), this sees ``st_nlink == 0`` and tries a new name.

    Raises:
        OSError: the file cannot be created, written or locked (``filename`` is its name
            in ``staging``).
    """
    fd = _open_unnamed(staging, stem) if _TMPFILE and _PROC_FD else None
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nothing else can reach it yet
            _write(fd, parts, fsync)
            _staging_here.add(stem)
            os.link(f"/proc/self/fd/{fd}", stem, dst_dir_fd=staging, follow_symlinks=True)
        except BaseException as exc:
            close_held(fd)
            _staging_here.discard(stem)
            if isinstance(exc, OSError):
                raise OSError(exc.errno, exc.strerror, stem) from None
            raise
        return stem, fd
    name, fd = _create_named(staging, stem)
    try:
        _write(fd, parts, fsync)
    except BaseException:
        discard_staged(staging, name, fd)
        raise
    return name, fd


def _write(fd: int, parts: Sequence[bytes], fsync: bool) -> None:
    views = [memoryview(part) for part in parts if part]
    while views:
        done = os.writev(fd, views)
        while views and done >= len(views[0]):
            done -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][done:]
    if fsync:
        os.fsync(fd)


def _open_unnamed(staging: int, name: str) -> int | None:
    """An unnamed file in ``staging``, or ``None`` where the filesystem has none."""
    try:
        return open_held(".", os.O_WRONLY | _TMPFILE | os.O_CLOEXEC, staging)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise OSError(exc.errno, exc.strerror, name) from None


def _create_named(staging: int, stem: str) -> tuple[str, int]:
    for attempt in range(_STAGE_ATTEMPTS):
        name = stem if attempt == 0 else f"{stem}.{attempt}"
        _staging_here.add(name)
        try:
            fd = open_held(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_FILE, staging)
        except BaseException:
            _staging_here.discard(name)
            raise
        try:
            # A sweep may hold the lock an instant, but leaves a young empty file alone.
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink > 0:
                return name, fd
        except BaseException:
            discard_staged(staging, name, fd)
            raise
        discard_staged(staging, name, fd)  # removed all the same (we stalled): again
    raise OSError(errno.EAGAIN, "concurrent sweeps kept removing the staged file", stem)


def discard_staged(staging: int, name: str, fd: int) -> None:
    """Unlink a staged name (if still there) and only then release its lock.

    Failures to unlink are ignored: a staged file left behind is invisible to readers, and
    the next sweep removes it once its lock is free.
    """
    try:
        os.unlink(name, dir_fd=staging)
    except OSError:
        pass
    finally:
        close_held(fd)
        _staging_here.discard(name)


def _abandoned(fd: int) -> bool:
    """Whether an empty staged file, locked by the sweep, stays unlocked a moment later."""
    fcntl.flock(fd, fcntl.LOCK_UN)  # let a writer between create and lock take it
    time.sleep(_EMPTY_RECHECK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def sweep_staging(staging: int) -> None:
    """Remove the staged files in ``staging`` whose writer is gone.

    A writer holds its staged file's lock from before it writes a byte until the file is
    placed or removed, so a file whose lock can be taken belongs to nobody. An empty one
    may be a live writer's that is not locked yet (where files are created by name): it is
    looked at again a moment later, and removed only if still unlocked. Only regular files are
    considered; a link, directory or FIFO planted in ``staging`` is left alone, never
    followed. Files this process is writing are skipped by name (on filesystems where
    ``flock`` is emulated with per-process locks, the lock alone would not keep them).
    """
    fd = os.open(".", O_DIR, dir_fd=staging)  # a private read position
    try:
        with os.scandir(fd) as entries:
            names = [entry.name for entry in entries if entry.is_file(follow_symlinks=False)]
    finally:
        os.close(fd)
    for name in names:
        if name in _staging_here:
            continue
        try:
            fd = open_held(name, os.O_RDONLY | O_FILE, staging)
        except OSError:
            continue  # gone already, or replaced by a link
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.fstat(fd).st_size and not _abandoned(fd):
                continue  # its writer had created it but not locked it yet
            os.unlink(name, dir_fd=staging)
        except OSError:
            continue  # locked: its writer is alive; or already gone
        finally:
            close_held(fd)
