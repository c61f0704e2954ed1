"""Descriptors, locks and staged files for the ``file://`` backend, safe across fork().

:mod:`gradientmail.backends.local` builds the mailbox on these; nothing here knows keys.

Opening
    Every name the backend manages inside its root is opened relative to a directory
    descriptor with ``O_NOFOLLOW | O_NONBLOCK`` (:data:`O_DIR`, :data:`O_FILE`), and the
    caller checks the type with :func:`kind`: a symbolic link is never followed, and a FIFO,
    socket or device never blocks an open.

Locks that survive neither death nor fork
    Descriptors that carry an ``flock`` (compare-and-swap lock stripes and staged files) are
    opened with :func:`open_held` and closed with :func:`close_held`. Those two pass through
    a gate that ``fork()`` waits on, for one system call at most and never for a whole
    write, so the set of such descriptors is exact when a process forks. In the child, an
    ``os.register_at_fork`` handler then:

    * closes the child's copies of held descriptors that other threads opened (the parent
      keeps its own copies, and with them its locks), so a child never holds a lock that
      the parent's thread believes it released;
    * replaces the process-local stripe locks (:func:`stripe_lock`), which another thread
      may have held at the fork;
    * makes every registered mailbox drop its cached root descriptor
      (``_after_fork_in_child``), so the child opens its own.

    Descriptors of the forking thread itself are left alone: it carries on in the child.

Staged files
    A value is written to a staged file in ``.tmp/`` first. :func:`stage` locks the file
    before writing it (on Linux, before it even has a name), and :func:`sweep_staging`
    removes only staged files whose lock it can take. So a live writer's file survives a
    sweep from any process, whatever PID namespace or host it runs in, while a dead
    writer's lock is released by the kernel and its debris goes at the next sweep.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "LOCKS",
    "O_DIR",
    "O_FILE",
    "STAGING",
    "close_held",
    "discard_staged",
    "fork_gate",
    "kind",
    "open_dir",
    "open_held",
    "open_managed",
    "open_root",
    "register_for_fork",
    "stage",
    "stripe_lock",
    "sweep_staging",
]

#: Where staged writes live, and the compare-and-swap lock stripes, inside a root.
STAGING, LOCKS = ".tmp", ".locks"
#: Flags for a directory the backend manages: never a link, never blocking.
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Flags added to every open of a file the backend manages.
O_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
STRIPES = 256
#: Tries to create a staged file by name that a concurrent sweep does not remove first.
_STAGE_ATTEMPTS = 5
#: How long the sweep gives the writer of an empty, unlocked staged file to lock it (s).
_EMPTY_RECHECK = 0.01
#: Unnamed files (Linux): 0 where the platform has none.
_TMPFILE = getattr(os, "O_TMPFILE", 0)
#: An unnamed file is given its name through /proc.
_PROC_FD = os.path.isdir("/proc/self/fd")

_KINDS = (
    (stat.S_ISREG, "regular file"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("regular file", "FIFO", ...)."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "special file"


def open_root(path: str) -> int:
    """Open the directory ``path``, making sure it holds :data:`STAGING` and :data:`LOCKS`.

    ``path`` itself may be reached through links (it is the caller's choice); the two
    directories inside never are (see :func:`open_managed`).

    Raises:
        OSError: ``filename`` is ``path`` when the root cannot be opened, else the name
            inside it.
    """
    root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in (STAGING, LOCKS):
            os.close(open_managed(root, name))
    except BaseException:
        os.close(root)
        raise
    return root


def open_managed(root: int, name: str) -> int:
    """Open :data:`STAGING` or :data:`LOCKS` in ``root``, making it if missing; never a link.

    Callers open it afresh for every use and never cache it: a cached descriptor would
    follow the directory if it were moved out of the root.

    Raises:
        OSError: ``filename`` is ``name`` (``ELOOP`` for a link, see :func:`open_dir`).
    """
    try:
        return open_dir(name, root)
    except FileNotFoundError:
        pass
    try:
        os.mkdir(name, 0o755, dir_fd=root)
    except FileExistsError:
        pass  # made concurrently, or something planted: open_dir decides
    return open_dir(name, root)


def open_dir(name: str, dir_fd: int) -> int:
    """Open the directory ``name`` in ``dir_fd``, never following a link.

    Raises:
        OSError: ``ELOOP`` if ``name`` is a symbolic link (Linux reports ``ENOTDIR`` for
            ``O_DIRECTORY | O_NOFOLLOW`` on a link), ``ENOTDIR`` if it is something else.
    """
    try:
        return os.open(name, O_DIR, dir_fd=dir_fd)
    except NotADirectoryError:
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        if link:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


class _ForkGate:
    """A passage that fork() closes: it waits until no thread is inside, then forks."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._inside = 0
        self._forking = False

    def __enter__(self) -> None:
        with self._cond:
            while self._forking:
                self._cond.wait()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._inside -= 1
            if self._forking and not self._inside:
                self._cond.notify_all()

    def close_for_fork(self) -> None:
        self._cond.acquire()  # held through the fork; released by reopen() in the parent
        self._forking = True
        while self._inside:
            self._cond.wait()

    def reopen(self) -> None:
        self._forking = False
        self._cond.notify_all()
        self._cond.release()


class ForkAware(Protocol):
    """What :func:`register_for_fork` takes: an object that drops its cached descriptors."""

    def _after_fork_in_child(self) -> None: ...


_gate = _ForkGate()
_held: dict[int, int] = {}  # descriptor -> ident of the thread that opened it
_stripe_locks = [threading.Lock() for _ in range(STRIPES)]
_registered: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_staging_here: set[str] = set()  # staged names this process is writing


def fork_gate() -> _ForkGate:
    """The gate to hold while opening descriptors and recording them where fork() looks."""
    return _gate


def register_for_fork(owner: ForkAware) -> None:
    """Have ``owner._after_fork_in_child()`` called in every forked child."""
    with _gate:
        _registered.add(owner)


def stripe_lock(stripe: int) -> threading.Lock:
    """The process-local lock of one stripe (a fresh set in every forked child)."""
    return _stripe_locks[stripe]


def open_held(name: str, flags: int, dir_fd: int, mode: int = 0o644) -> int:
    """``os.open`` for a descriptor that will carry a lock; close it with :func:`close_held`."""
    with _gate:
        fd = os.open(name, flags, mode, dir_fd=dir_fd)
        _held[fd] = threading.get_ident()
    return fd


def close_held(fd: int) -> None:
    """Close a descriptor from :func:`open_held`, releasing its lock."""
    with _gate:
        _held.pop(fd, None)
        os.close(fd)


def _before_fork() -> None:
    _gate.close_for_fork()


def _after_fork_in_parent() -> None:
    _gate.reopen()


def _after_fork_in_child() -> None:
    global _gate
    me = threading.get_ident()
    for fd, owner in list(_held.items()):
        if owner != me:
            del _held[fd]
            try:
                os.close(fd)  # the child's copy only: the parent keeps its lock
            except OSError:
                pass
    _stripe_locks[:] = [threading.Lock() for _ in range(STRIPES)]
    _staging_here.clear()  # other threads' writes: they go on in the parent, not here
    _gate = _ForkGate()  # the old one stays closed: its lock went with the fork
    for mailbox in list(_registered):
        mailbox._after_fork_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


# -- staged files ---------------------------------------------------------------------------


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
