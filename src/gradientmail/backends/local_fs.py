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
    * makes every registered mailbox drop its cached directory descriptors
      (``_after_fork_in_child``), so the child opens its own.

    Descriptors of the forking thread itself are left alone: it carries on in the child.

Staged files
    A value is written to a staged file in ``.tmp/`` first. :func:`create_staged` locks the
    file before writing it, and :func:`sweep_staging` removes only staged files whose lock
    it can take. So a live writer's file survives a sweep from any process, whatever PID
    namespace or host it runs in, while a dead writer's lock is released by the kernel and
    its debris goes at the next sweep.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
import weakref
from typing import NamedTuple, Protocol

__all__ = [
    "LOCKS",
    "O_DIR",
    "O_FILE",
    "STAGING",
    "RootDirs",
    "close_held",
    "create_staged",
    "discard_staged",
    "fork_gate",
    "kind",
    "open_dir",
    "open_held",
    "open_root",
    "register_for_fork",
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
#: Tries to create a staged file that a concurrent sweep does not remove first.
_STAGE_ATTEMPTS = 5

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


class RootDirs(NamedTuple):
    """Descriptors of a mailbox's root and of the two directories it manages inside."""

    root: int
    staging: int
    locks: int


def open_root(path: str) -> RootDirs:
    """Open the directory ``path`` and its :data:`STAGING` and :data:`LOCKS` (made if missing).

    ``path`` itself may be reached through links (it is the caller's choice); the two
    directories inside never are.

    Raises:
        OSError: ``filename`` is ``path`` when the root cannot be opened, else the name
            inside it (``ELOOP`` for a link, see :func:`open_dir`).
    """
    root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    opened = [root]
    try:
        for name in (STAGING, LOCKS):
            try:
                os.mkdir(name, 0o755, dir_fd=root)
            except FileExistsError:
                pass  # made by an earlier open, or something planted: open_dir decides
            opened.append(open_dir(name, root))
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    return RootDirs(*opened)


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
    """What :func:`register_for_fork` takes: an object that drops cached descriptors."""

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


def create_staged(staging: int, stem: str) -> tuple[str, int]:
    """Create a new staged file in ``staging``, locked, and return its name and descriptor.

    The file is named ``stem`` (a unique name) and locked before anything is written to
    it. A sweep can take the lock in the instant between create and lock; the file is then
    unlinked, which this sees (``st_nlink == 0``) before writing, and tries a new name.
    Release it with :func:`discard_staged`.

    Raises:
        OSError: the file cannot be created or locked (``filename`` is the name in
            ``staging``).
    """
    for attempt in range(_STAGE_ATTEMPTS):
        name = stem if attempt == 0 else f"{stem}.{attempt}"
        _staging_here.add(name)
        try:
            fd = open_held(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_FILE, staging)
        except BaseException:
            _staging_here.discard(name)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_nlink > 0:
                return name, fd
        except BlockingIOError:
            pass  # a sweep holds the lock and is about to unlink the file
        except BaseException:
            discard_staged(staging, name, fd)
            raise
        discard_staged(staging, name, fd)
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


def sweep_staging(staging: int) -> None:
    """Remove the staged files in ``staging`` whose writer is gone.

    A writer holds its staged file's lock until the file is placed or removed, so a file
    whose lock can be taken belongs to nobody. Only regular files are considered; a link,
    directory or FIFO planted in ``staging`` is left alone, never followed. Files this
    process is writing are skipped by name (on filesystems where ``flock`` is emulated with
    per-process locks, the lock alone would not keep them).
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
            os.unlink(name, dir_fd=staging)
        except OSError:
            continue  # locked: its writer is alive; or already gone
        finally:
            close_held(fd)
