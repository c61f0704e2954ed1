"""Descriptors and locks for the ``file://`` backend, safe across fork().

:mod:`gradientmail.backends.local` builds the mailbox on these; nothing here knows keys.

Opening
    Every name the backend manages inside its root is opened relative to a directory
    descriptor with ``O_NOFOLLOW | O_NONBLOCK`` (:data:`O_DIR`, :data:`O_FILE`), and the
    caller checks the type with :func:`kind`: a symbolic link is never followed, and a FIFO,
    socket or device never blocks an open.

Folders that come and go
    A delete removes the folders its key left empty (:func:`prune_empty`, by ``rmdir``,
    which refuses a folder that is not empty). A walk that makes missing folders
    (:func:`open_below` with ``create``) makes one again when it was removed while the walk
    passed it, and a writer that finds its folder removed before it placed its value
    (:func:`removed`) opens the path again: no write is lost to a removed folder.

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
    * makes every registered mailbox root drop its cached descriptor
      (``_after_fork_in_child``), so the child opens its own.

    Descriptors of the forking thread itself are left alone: it carries on in the child.

Staged files live in :mod:`gradientmail.backends._local_staging`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "LOCKS",
    "O_DIR",
    "O_FILE",
    "STAGING",
    "close_chain",
    "close_held",
    "fork_gate",
    "kind",
    "open_below",
    "open_chain",
    "open_dir",
    "open_held",
    "open_managed",
    "open_root",
    "prune_empty",
    "register_for_fork",
    "removed",
    "stripe_lock",
]

#: Where staged writes live, and the compare-and-swap lock stripes, inside a root.
STAGING, LOCKS = ".tmp", ".locks"
#: Flags for a directory the backend manages: never a link, never blocking.
O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Flags added to every open of a file the backend manages.
O_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
STRIPES = 256
#: How many times a walk with ``create`` makes again a directory removed under it.
REMADE = 100

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


def open_below(root: int, names: Sequence[str], *, create: bool) -> int:
    """Open the directory ``root/names[0]/names[1]/...``, one component at a time.

    Every component is opened relative to the one before with ``O_NOFOLLOW`` (never a
    link), and made if missing when ``create`` is true; otherwise -1 is returned for a
    missing one. The caller closes the descriptor returned.

    With ``create``, a component removed while the walk passes it (a delete removed the
    directory when its last key went, see :func:`prune_empty`) is made again: the walk
    starts over from ``root``, up to :data:`REMADE` times.

    Raises:
        OSError: ``filename`` is the failing path inside ``root`` (``ELOOP`` for a link,
            ``ENOTDIR`` for anything else that is not a directory).
    """
    for _ in range(REMADE if create else 0):
        try:
            return _open_below(root, names, create)
        except FileNotFoundError:
            continue  # a directory on the way went while we passed it: make it again
    return _open_below(root, names, create)


def _open_below(root: int, names: Sequence[str], create: bool) -> int:
    fd = root
    try:
        for depth, name in enumerate(names, 1):
            try:
                child = _open_or_make(fd, name, create)
            except OSError as exc:
                exc.filename = "/".join(names[:depth])
                raise
            if fd != root:
                os.close(fd)
            fd = child
            if fd < 0:
                return -1
    except BaseException:
        if fd not in (root, -1):
            os.close(fd)
        raise
    return fd


def open_chain(root: int, names: Sequence[str]) -> list[int] | None:
    """Open ``root/names[0]``, ``root/names[0]/names[1]``... and return every descriptor.

    Each is opened relative to the one before, never through a link; ``None`` when one is
    missing. The caller closes them (:func:`close_chain`).

    Raises:
        OSError: as :func:`open_below` (``filename`` is the failing path inside ``root``).
    """
    chain: list[int] = []
    try:
        for depth, name in enumerate(names, 1):
            try:
                chain.append(open_dir(name, chain[-1] if chain else root))
            except FileNotFoundError:
                close_chain(chain)
                return None
            except OSError as exc:
                exc.filename = "/".join(names[:depth])
                raise
    except BaseException:
        close_chain(chain)
        raise
    return chain


def close_chain(chain: Sequence[int]) -> None:
    """Close the descriptors :func:`open_chain` returned."""
    for fd in chain:
        os.close(fd)


def prune_empty(root: int, chain: Sequence[int], names: Sequence[str]) -> None:
    """Remove the directories of ``names`` that are empty, deepest first, never ``root``.

    ``chain`` is :func:`open_chain`'s answer for ``names``. Each directory is removed by
    ``rmdir``, which the system refuses for a directory that is not empty, so a name
    created in it first keeps it; the walk stops at the first one kept (or gone already).
    A create that opened a directory just before it went makes it again (see
    :func:`open_below`) and never loses its write.
    """
    for depth in range(len(names) - 1, -1, -1):
        try:
            os.rmdir(names[depth], dir_fd=chain[depth - 1] if depth else root)
        except OSError:
            return  # not empty, gone already, or replaced by something else: kept


def removed(fd: int) -> bool:
    """Whether the directory open as ``fd`` was removed (a write into it fails)."""
    try:
        return os.fstat(fd).st_nlink == 0
    except OSError as exc:
        return exc.errno == errno.ESTALE


def _open_or_make(parent: int, name: str, create: bool) -> int:
    try:
        return open_dir(name, parent)
    except FileNotFoundError:
        if not create:
            return -1
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass  # a concurrent create
    return open_dir(name, parent)


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
    _gate = _ForkGate()  # the old one stays closed: its lock went with the fork
    for mailbox in list(_registered):
        mailbox._after_fork_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
