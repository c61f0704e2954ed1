"""``file:///dir``: a mailbox in a local or shared POSIX directory.

``file:///abs/dir`` or a plain path (created if missing); option ``fsync`` (default
``true``). Guarantees, in short: ``put_if_absent`` is atomic across threads and processes
(a staged file ``link()``-ed into place); compare-and-swap and ``put`` take one of 256
``flock`` stripes, ``put_if_absent`` and ``delete`` none, and CAS is linearizable against
all of them (``local_swaps`` says how a delete gives way to a swap without a lock);
readers never see a partial value; no link inside the root is followed and no key escapes
it; FIFOs, sockets and devices are refused, never opened; threads may share a handle and
``fork()`` is safe at any time; ``list`` streams in ascending key order with bounded
memory. ``docs/file-store.md`` states each guarantee in full, with the layout.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from gradientmail._errors import (
    BackendError,
    BucketNotFoundError,
    ConfigurationError,
    KeyNotFoundError,
    OutcomeUnknownError,
)
from gradientmail.backends import _local_fs as fs
from gradientmail.backends import _local_layout as layout
from gradientmail.backends import _local_staging as staging_files
from gradientmail.backends import _local_swaps as swaps
from gradientmail.backends._base import BaseMailbox, Conflict, Stat
from gradientmail.backends._local_layout import CHUNK_BYTES
from gradientmail.backends._local_root import RootDirectory, inside
from gradientmail.backends._options import file_url, parse_bool, parse_options, redact, split_url
from gradientmail.mailbox import Capability, Version

__all__ = ["CHUNK_BYTES", "FileMailbox"]  # CHUNK_BYTES: re-exported from local_layout

_HOST = socket.gethostname().replace(".", "_")


class FileMailbox(BaseMailbox):
    """A mailbox in a directory; see the module docstring for layout and guarantees."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.ATOMIC_CREATE,
            Capability.COMPARE_AND_SWAP,
            Capability.SHARED_ACROSS_PROCESSES,
            Capability.LIST_START_AFTER,
        }
    )

    def __init__(self, root: str, *, fsync: bool = True) -> None:
        options = {} if fsync else {"fsync": False}
        super().__init__(file_url(root), options)
        self.root = root
        self.fsync = fsync
        self._dir = RootDirectory(root, self.url)
        try:
            os.makedirs(root, exist_ok=True)
        except FileExistsError as exc:
            raise BackendError(
                f"{root} exists and is not a directory; choose another path", backend=self.url
            ) from exc
        except OSError as exc:
            raise self._map(exc, None) from exc
        try:
            with self._managed(fs.STAGING) as staging:
                staging_files.sweep_staging(staging)
                swaps.sweep(staging)
        except OSError as exc:
            raise self._map(exc, None) from exc

    @classmethod
    def open(cls, url: str, **options: Any) -> FileMailbox:
        """Open ``file:///abs/dir``. Raises ``ConfigurationError`` for a bad URL or option."""
        opts = parse_options("file", options, {"fsync": parse_bool}, {"fsync": True})
        split = split_url(url)
        if "@" in split.netloc:  # never echoed: it may hold a password
            raise ConfigurationError(
                "file:// URLs carry no user name or password; use file:///abs/dir"
            )
        if split.netloc not in ("", "localhost"):
            raise ConfigurationError(
                f"file:// URLs name a local path, not host {split.netloc!r}: "
                "use file:///abs/dir (three slashes) or a plain path"
            )
        if not split.path.startswith("/"):
            raise ConfigurationError(f"file:// URL {redact(url)!r} needs an absolute path")
        if "\x00" in split.path:
            raise ConfigurationError("a file:// path must not contain a NUL character (%00)")
        root = os.path.normpath(split.path)
        return cls(root, fsync=opts["fsync"])

    # -- the directory and errors -----------------------------------------------------------

    def _root(self) -> int:
        return self._dir.fd()

    @contextmanager
    def _managed(self, name: str) -> Iterator[int]:
        with self._dir.managed(name) as fd:
            yield fd

    def close(self) -> None:
        """Close cached directory descriptors; they reopen on next use."""
        self._dir.close()

    def _root_gone(self) -> bool:
        return self._dir.gone()

    def _removed(self) -> BucketNotFoundError:
        return self._dir.removed()

    def _foreign(self, mode: int, name: str, key: str | None) -> BackendError:
        return self._dir.foreign(mode, name, key)

    def _map(self, exc: OSError, key: str | None) -> BackendError:
        return self._dir.map(exc, key)

    def _write_id(self, raw: bytes, key: str) -> str:
        write_id = layout.parse_header(raw)
        if write_id is None:
            raise BackendError(
                "value file has no gradientmail header; was it written by hand?",
                key=key,
                backend=self.url,
            )
        return write_id

    def _landed(self, exc: OSError, key: str) -> OutcomeUnknownError:
        return OutcomeUnknownError(
            f"the value was placed, but an I/O error followed ({exc.strerror or exc}), so it "
            "may not survive a machine crash; read the key back to see what is stored",
            key=key,
            backend=self.url,
        )

    # -- paths ------------------------------------------------------------------------------

    @contextmanager
    def _parent(self, names: list[str], *, create: bool) -> Iterator[int | None]:
        """The directory holding the leaf, or ``None`` if it is missing and not created.

        Opened from the root afresh on every call (see :func:`local_fs.open_below`): a
        cached descriptor would follow a directory moved out of the root.
        """
        root = self._root()
        fd = fs.open_below(root, names, create=create) if names else root
        try:
            yield fd if fd >= 0 else None
        finally:
            if fd not in (root, -1):
                os.close(fd)

    @contextmanager
    def _staged(self, data: bytes, write_id: str) -> Iterator[tuple[int, str]]:
        """``(staging, name)``: the value written whole to a staged file, locked until the end.

        The staged file is removed at the end if it was not placed (see ``local_staging``).
        """
        with self._managed(fs.STAGING) as staging:
            try:
                staged, fd = staging_files.stage(
                    staging,
                    f"{_HOST}.{os.getpid()}.{write_id}",
                    (layout.header(write_id), data),
                    fsync=self.fsync,
                )
            except OSError as exc:
                raise inside(exc, fs.STAGING, str(exc.filename or "")) from None
            try:
                yield staging, staged
            finally:
                staging_files.discard_staged(staging, staged, fd)

    def _publish(
        self, key: str, data: bytes, write_id: str, place: Callable[[str, int, int, str, str], bool]
    ) -> bool:
        """Stage the value, then ``place(staged, staging, parent, leaf, path)`` it, fsyncing.

        Returns what ``place`` returned: whether the value was placed (``False``: the name
        was taken). A folder removed before the value got in (a delete took its last key)
        is made again and the value placed there. An error once the value was placed
        raises ``OutcomeUnknownError``.
        """
        names, leaf = layout.encode(key)
        path = "/".join([*names, leaf])
        with self._staged(data, write_id) as (staging, staged):
            for _ in range(fs.REMADE):
                with self._parent(names, create=True) as parent:
                    assert parent is not None
                    try:
                        placed = place(staged, staging, parent, leaf, path)
                    except FileNotFoundError:
                        if fs.removed(parent):
                            continue  # emptied and removed since we opened it: make it again
                        raise
                    if placed:
                        self._sync(parent, key)
                    return placed
        raise FileNotFoundError(errno.ENOENT, "its folder kept being removed", path)

    def _sync(self, parent: int, key: str) -> None:
        """fsync the directory a value was just placed in (with ``fsync``)."""
        if self.fsync:
            try:
                os.fsync(parent)
            except OSError as exc:
                raise self._landed(exc, key) from exc

    def _open_value(self, key: str) -> int | None:
        """A descriptor of the key's value file, or ``None`` if there is none."""
        names, leaf = layout.encode(key)
        with self._parent(names, create=False) as parent:
            if parent is None:
                return None
            try:
                fd = os.open(leaf, os.O_RDONLY | fs.O_FILE, dir_fd=parent)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise inside(exc, *names, leaf) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise self._foreign(mode, "/".join([*names, leaf]), key)
        return fd

    # -- primitives -------------------------------------------------------------------------

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        def link(staged: str, staging: int, parent: int, leaf: str, path: str) -> bool:
            """Link the staged file to ``leaf``; ``False`` if the name is taken."""
            try:
                os.link(staged, leaf, src_dir_fd=staging, dst_dir_fd=parent, follow_symlinks=False)
                return True
            except FileExistsError:
                try:
                    mode = os.stat(leaf, dir_fd=parent, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    return False  # deleted since; the name was taken when we tried: we lost
                if not stat.S_ISREG(mode):  # not a value: saying "someone else won" would lie
                    raise self._foreign(mode, path, key) from None
                return False
            except OSError as exc:
                raise inside(exc, path) from None

        try:
            placed = self._publish(key, data, write_id, link)
        except OSError as exc:
            raise self._map(exc, key) from exc
        return Version(write_id) if placed else Conflict.LOST

    def _read(self, key: str) -> tuple[bytes, Version]:
        try:
            fd = self._open_value(key)
            if fd is None:
                raise self._removed() if self._root_gone() else KeyNotFoundError(key, self.url)
            with os.fdopen(fd, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            raise self._map(exc, key) from exc
        return raw[layout.HEADER_BYTES :], Version(self._write_id(raw, key))

    def _stat(self, key: str) -> Stat | None:
        try:
            fd = self._open_value(key)
            if fd is None:
                if self._root_gone():
                    raise self._removed()
                return None
            try:
                raw = os.pread(fd, layout.HEADER_BYTES, 0)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._map(exc, key) from exc
        write_id = self._write_id(raw, key)
        return Stat(Version(write_id), write_id)

    @staticmethod
    def _rename_into_place(staged: str, staging: int, parent: int, leaf: str, path: str) -> bool:
        try:
            os.rename(staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)
        except OSError as exc:
            raise inside(exc, path) from None
        return True

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        try:
            with self._dir.locked(key):
                self._publish(key, data, write_id, self._rename_into_place)
        except OSError as exc:
            raise self._map(exc, key) from exc

    def _delete(self, key: str) -> None:
        names, leaf = layout.encode(key)
        name = swaps.announcement(key)
        try:
            root = self._root()
            with self._managed(fs.STAGING) as staging:
                chain = fs.open_chain(root, names)
                if chain is None:
                    return
                try:
                    try:
                        deleted = swaps.delete(chain[-1] if chain else root, leaf, staging, name)
                    except OSError as exc:
                        where = [*names, leaf] if exc.filename == leaf else [fs.STAGING, name]
                        raise inside(exc, *where) from None
                    if deleted:
                        fs.prune_empty(root, chain, names)
                finally:
                    fs.close_chain(chain)
        except OSError as exc:
            raise self._map(exc, key) from exc

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        names, leaf = layout.encode(key)
        path = "/".join([*names, leaf])

        def matches() -> bool:
            current = self._stat(key)
            return current is not None and current.version == version

        try:
            # Versions never repeat: a key not at ``version`` now never will be again.
            if not matches():
                return Conflict.LOST
            with self._staged(data, write_id) as (staging, staged):

                def place(announced: int) -> None:
                    with self._parent(names, create=False) as parent:
                        if parent is None:
                            raise FileNotFoundError(errno.ENOENT, "no key", "/".join(names))
                        self._rename_into_place(staged, announced, parent, leaf, path)
                        self._sync(parent, key)

                with self._dir.locked(key):
                    name = swaps.announcement(key)
                    if not swaps.swap(staging, name, staged, matches, place):
                        return Conflict.LOST
        except OSError as exc:
            raise self._map(exc, key) from exc
        return Version(write_id)

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return self._list(prefix)

    def _iter_keys_after(self, prefix: str, start_after: str) -> Iterator[str]:
        return self._list(prefix, start_after)

    def _list(self, prefix: str, start_after: str | None = None) -> Generator[str, None, None]:
        try:
            root = self._root()
            if os.fstat(root).st_nlink == 0:
                raise self._removed()
            fd = os.open(".", fs.O_DIR, dir_fd=root)  # a read position of this listing's own
        except OSError as exc:
            raise self._map(exc, None) from exc
        try:
            yield from layout.walk(fd, "", prefix, start_after)
        except OSError as exc:
            raise self._map(exc, None) from exc
