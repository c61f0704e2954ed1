"""The directory of a ``file://`` mailbox: its descriptor, lock stripes and error mapping.

:class:`RootDirectory` keeps the root open once per process (a forked child opens its own),
opens ``.tmp`` and ``.locks`` afresh for every use, holds a key's lock stripe for a swap or
a ``put``, and is the one place OS errors become gradientmail errors, naming the entry
involved. :class:`~gradientmail.backends.local.FileMailbox` is built on it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from gradientmail._errors import BackendError, BucketNotFoundError
from gradientmail.backends import _local_errors as local_errors
from gradientmail.backends import _local_fs as fs

__all__ = ["RootDirectory", "inside"]


def inside(exc: OSError, *names: str) -> OSError:
    """Name the failing entry by its path inside the root, for the message."""
    exc.filename = "/".join(names)
    return exc


class RootDirectory:
    """The root directory ``path`` of the mailbox at ``url``, shared by a handle's threads.

    ``close()`` must not race with calls on the same handle from other threads.
    """

    def __init__(self, path: str, url: str) -> None:
        self.path = path
        self.url = url
        self._cached: int | None = None  # the root's descriptor, opened once per process
        self._cache_lock = threading.Lock()
        fs.register_for_fork(self)

    def fd(self) -> int:
        """The root's descriptor, opened on first use (``BackendError`` if it cannot be)."""
        fd = self._cached
        if fd is None:
            with self._cache_lock:
                fd = self._cached
                if fd is None:
                    try:
                        with fs.fork_gate():  # a fork sees it either cached or not yet open
                            fd = self._cached = fs.open_root(self.path)
                    except FileNotFoundError as exc:
                        if exc.filename == self.path:
                            raise self.removed() from exc
                        raise self.map(exc, None) from exc
                    except OSError as exc:
                        raise self.map(exc, None) from exc
        return fd

    @contextmanager
    def managed(self, name: str) -> Iterator[int]:
        """``.tmp`` or ``.locks``, opened for one use (``OSError`` names it)."""
        fd = fs.open_managed(self.fd(), name)
        try:
            yield fd
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close the cached descriptor; it reopens on next use."""
        with self._cache_lock:
            self._drop_cached()

    def __del__(self) -> None:
        self._drop_cached()

    def _after_fork_in_child(self) -> None:
        """Drop the parent's descriptor (called in a forked child by ``local_fs``)."""
        self._cache_lock = threading.Lock()
        self._drop_cached()  # closes the child's copy only

    def _drop_cached(self) -> None:
        fd, self._cached = getattr(self, "_cached", None), None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    # -- errors -----------------------------------------------------------------------------

    def gone(self) -> bool:
        """Whether the root was removed after it was opened."""
        fd = self._cached
        try:
            if fd is not None:
                return os.fstat(fd).st_nlink == 0
            return not os.path.isdir(self.path)
        except OSError:
            return False

    def removed(self) -> BucketNotFoundError:
        return local_errors.removed(self.path, self.url)

    def foreign(self, mode: int, name: str, key: str | None) -> BackendError:
        return local_errors.foreign(mode, name, key, root=self.path, url=self.url)

    def map(self, exc: OSError, key: str | None) -> BackendError:
        """The one place OS errors become gradientmail errors, naming the entry involved."""
        if exc.errno == errno.ENOENT and self.gone():
            return self.removed()
        return local_errors.mapped(exc, key, root=self.path, url=self.url)

    # -- lock stripes -----------------------------------------------------------------------

    @staticmethod
    def stripe(key: str) -> int:
        """Which of the 256 lock stripes ``key`` takes."""
        return hashlib.blake2b(key.encode("utf-8"), digest_size=2).digest()[0]

    @contextmanager
    def locked(self, key: str) -> Iterator[None]:
        """Hold ``key``'s lock stripe: an ``flock`` on ``.locks/NN`` and this process's lock.

        Taken by swaps and ``put`` only (``local_swaps`` says why deletes need none).
        """
        stripe = self.stripe(key)
        name = f"{stripe:02x}"
        with fs.stripe_lock(stripe):
            with self.managed(fs.LOCKS) as locks:
                try:
                    fd = fs.open_held(name, os.O_RDWR | os.O_CREAT | fs.O_FILE, locks)
                except OSError as exc:
                    raise inside(exc, fs.LOCKS, name) from None
            try:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):
                    raise self.foreign(mode, f"{fs.LOCKS}/{name}", key)
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                fs.close_held(fd)  # releases the flock
