"""``file:///dir``: a mailbox in a local or shared POSIX directory.

URL and options
    ``file:///abs/dir`` or a plain path. The directory is created if missing. A URL is
    percent-decoded once (``file:///runs/a%3Fb`` is the directory ``/runs/a?b``); a plain
    path is taken literally. The mailbox's ``url`` is the percent-encoded form, so a
    pickled mailbox reopens the same directory whatever its name holds. User info
    (``file://user:pw@/x``) is refused and never echoed.
    ``fsync`` (bool, default ``true``): fsync each value and its directory before the key
    becomes visible, so a power loss cannot leave a visible key with missing bytes. With
    ``false`` a crash of the *process* still never exposes partial bytes (the value is
    linked into place whole), but a crash of the *machine* may lose recent keys.

Layout (internal; never edit by hand)
    Each key segment becomes a directory ``SEG.d`` and the last one a file ``SEG.v``, so
    ``a`` and ``a/b`` coexist (``a.v`` beside ``a.d/b.v``). Segments longer than
    :data:`CHUNK_BYTES` are split into ``PART.c`` directories, so 1024-byte keys fit under
    any ``NAME_MAX``. Every value file starts with a header carrying the write id that
    stored it; that id is the key's :class:`~gradientmail.mailbox.Version`, so versions
    never repeat (unlike mtimes or inode numbers). ``.tmp/`` holds staged writes and
    ``.locks/`` the compare-and-swap lock stripes; neither can be named by a key.

Guarantees
    * ``put_if_absent`` is atomic across threads and processes: the value is written and
      fsynced to a staged file, then ``link()``-ed to its final name, which fails if the
      name exists. Readers never see a partly written value.
    * A crash mid-write leaves only a staged file in ``.tmp/``: invisible to ``list`` and
      ``get``, and removed by the next open once its writer is gone.
    * No key reaches outside the root: keys cannot contain ``..``, every path component is
      opened relative to its parent with ``O_NOFOLLOW``, and a symlink planted inside the
      root makes the operation fail rather than be followed.
    * ``put``, ``delete`` and compare-and-swap take a per-key lock (one of 256 ``flock``
      stripes plus a process-local lock), so CAS is linearizable against them across
      processes. ``put_if_absent`` needs no lock.
    * ``list`` walks the tree lazily, one directory at a time, in ascending key order.

Empty directories left by ``delete`` are kept: removing them would race with a concurrent
create below them. They cost nothing but a few inodes.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import heapq
import os
import socket
import stat as stat_mod
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from gradientmail.backends.base import BaseMailbox, Conflict, Stat
from gradientmail.backends.options import file_url, parse_bool, parse_options, redact, split_url
from gradientmail.errors import (
    AccessDeniedError,
    BackendError,
    ConfigurationError,
    KeyNotFoundError,
)
from gradientmail.mailbox import Capability, Version

__all__ = ["CHUNK_BYTES", "FileMailbox"]

#: Longest segment piece stored in one directory entry (well under every NAME_MAX).
CHUNK_BYTES = 240
_MAGIC = b"GM1 "
_HEADER = len(_MAGIC) + 32 + 1  # magic, 32-hex write id, newline
_STAGING = ".tmp"
_LOCKS = ".locks"
_STRIPES = 256
#: Staged files older than this are removed on open even if their writer looks alive.
STALE_STAGING_SECONDS = 3600.0
_HOST = socket.gethostname().replace(".", "_")

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PROCESS_LOCKS = [threading.Lock() for _ in range(_STRIPES)]
#: Parent-directory descriptors kept open per mailbox and process (beyond that, opened and
#: closed per operation).
_PARENTS_CACHED = 256


def _chunks(segment: str) -> list[str]:
    """Split a segment into pieces of at most CHUNK_BYTES bytes, never inside a character."""
    if len(segment.encode("utf-8")) <= CHUNK_BYTES:
        return [segment]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for char in segment:
        width = len(char.encode("utf-8"))
        if size + width > CHUNK_BYTES:
            pieces.append("".join(current))
            current, size = [], 0
        current.append(char)
        size += width
    pieces.append("".join(current))
    return pieces


def _encode(key: str) -> tuple[list[str], str]:
    """Map a valid key to (directory names, leaf file name)."""
    names: list[str] = []
    segments = key.split("/")
    for index, segment in enumerate(segments):
        pieces = _chunks(segment)
        names.extend(piece + ".c" for piece in pieces[:-1])
        names.append(pieces[-1] + (".v" if index == len(segments) - 1 else ".d"))
    return names[:-1], names[-1]


def _header(write_id: str) -> bytes:
    return _MAGIC + write_id.encode("ascii") + b"\n"


def _parse_header(raw: bytes, key: str, where: str) -> str:
    if len(raw) < _HEADER or not raw.startswith(_MAGIC) or raw[_HEADER - 1 : _HEADER] != b"\n":
        raise BackendError(
            "value file has no gradientmail header; was it written by hand?", key=key, backend=where
        )
    return raw[len(_MAGIC) : _HEADER - 1].decode("ascii")


class FileMailbox(BaseMailbox):
    """A mailbox in a directory; see the module docstring for layout and guarantees."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.SHARED_ACROSS_PROCESSES}
    )

    def __init__(self, root: str, *, fsync: bool = True) -> None:
        options = {} if fsync else {"fsync": False}
        super().__init__(file_url(root), options)
        self.root = root
        self.fsync = fsync
        self._fds: tuple[int, int, int, int] | None = None  # pid, root, staging, locks
        # Descriptors of parent directories, by encoded path, for this process. gradientmail
        # never removes a directory inside the root, so a cached descriptor stays valid.
        self._parents: dict[tuple[str, ...], int] = {}
        self._fd_lock = threading.Lock()
        try:
            os.makedirs(os.path.join(root, _STAGING), exist_ok=True)
            os.makedirs(os.path.join(root, _LOCKS), exist_ok=True)
        except OSError as exc:
            raise self._map(exc, None) from exc
        self._sweep_staging()

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

    # -- descriptors, errors, locks ---------------------------------------------------------

    def _dirs(self) -> tuple[int, int, int]:
        """Descriptors of root, staging and locks, opened once per process."""
        fds = self._fds
        if fds is None or fds[0] != os.getpid():
            with self._fd_lock:
                fds = self._fds
                if fds is None or fds[0] != os.getpid():
                    root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                    staging = os.open(_STAGING, _O_DIR, dir_fd=root)
                    locks = os.open(_LOCKS, _O_DIR, dir_fd=root)
                    fds = (os.getpid(), root, staging, locks)
                    self._parents = {}  # a forked child must not share the parent's cache
                    self._fds = fds
        return fds[1], fds[2], fds[3]

    def close(self) -> None:
        """Close cached directory descriptors; they reopen on next use."""
        with self._fd_lock:
            fds, self._fds = self._fds, None
            parents, self._parents = self._parents, {}
        if fds is not None and fds[0] == os.getpid():
            for fd in (*fds[1:], *parents.values()):
                os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing useful to report
            pass

    def _map(self, exc: OSError, key: str | None) -> BackendError:
        """The one place OS errors become gradientmail errors."""
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            return BackendError(
                "a path component inside the mailbox root is a symbolic link or not a "
                "directory; gradientmail never follows links inside a file:// root",
                key=key,
                backend=self.url,
            )
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return AccessDeniedError(
                f"permission denied ({exc.strerror}); check the directory's owner and mode",
                key=key,
                backend=self.url,
            )
        return BackendError(f"filesystem error: {exc.strerror or exc}", key=key, backend=self.url)

    @contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        stripe = hashlib.blake2b(key.encode("utf-8"), digest_size=2).digest()[0]
        _, _, locks = self._dirs()
        with _PROCESS_LOCKS[stripe]:
            fd = os.open(
                f"{stripe:02x}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644, dir_fd=locks
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the flock

    # -- paths ------------------------------------------------------------------------------

    @contextmanager
    def _parent(self, names: list[str], *, create: bool) -> Iterator[int | None]:
        """The directory holding the leaf, or ``None`` if it is missing and not created.

        Opened component by component relative to the root, never following a link. Up to
        :data:`_PARENTS_CACHED` descriptors are kept open per process, which saves three
        system calls on every operation under a known directory.
        """
        root, _, _ = self._dirs()
        key = tuple(names)
        cached = self._parents.get(key)
        if cached is not None:
            yield cached
            return
        fd = os.dup(root)
        try:
            for name in names:
                try:
                    child = os.open(name, _O_DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        fd = -1
                        break
                    try:
                        os.mkdir(name, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    child = os.open(name, _O_DIR, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        if fd < 0:
            yield None
            return
        with self._fd_lock:
            keep = len(self._parents) < _PARENTS_CACHED and key not in self._parents
            if keep:
                self._parents[key] = fd
        try:
            yield fd
        finally:
            if not keep:
                os.close(fd)

    def _stage(self, data: bytes, write_id: str) -> str:
        """Write header and data to a new file in .tmp/, fsynced; return its name."""
        _, staging, _ = self._dirs()
        name = f"{_HOST}.{os.getpid()}.{write_id}"  # write ids are unique
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=staging
        )
        try:
            view = memoryview(_header(write_id) + data)
            while view:
                view = view[os.write(fd, view) :]
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(name, dir_fd=staging)
            raise
        os.close(fd)
        return name

    def _unstage(self, name: str) -> None:
        _, staging, _ = self._dirs()
        try:
            os.unlink(name, dir_fd=staging)
        except FileNotFoundError:
            pass

    def _publish(
        self, key: str, data: bytes, write_id: str, place: Callable[[str, int, str], None]
    ) -> None:
        """Stage the value, then ``place(staged, parent_fd, leaf)`` it, fsyncing the dir."""
        names, leaf = _encode(key)
        staged = self._stage(data, write_id)
        try:
            with self._parent(names, create=True) as parent:
                assert parent is not None
                place(staged, parent, leaf)
                if self.fsync:
                    os.fsync(parent)
        finally:
            self._unstage(staged)

    def _open_leaf(self, key: str) -> int | None:
        names, leaf = _encode(key)
        with self._parent(names, create=False) as parent:
            if parent is None:
                return None
            try:
                return os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except FileNotFoundError:
                return None

    # -- primitives -------------------------------------------------------------------------

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        _, staging, _ = self._dirs()

        def link(staged: str, parent: int, leaf: str) -> None:
            os.link(staged, leaf, src_dir_fd=staging, dst_dir_fd=parent, follow_symlinks=False)

        try:
            self._publish(key, data, write_id, link)
        except FileExistsError:
            return Conflict.LOST
        except OSError as exc:
            raise self._map(exc, key) from exc
        return Version(write_id)

    def _read(self, key: str) -> tuple[bytes, Version]:
        try:
            fd = self._open_leaf(key)
            if fd is None:
                raise KeyNotFoundError(key, self.url)
            with os.fdopen(fd, "rb") as handle:
                raw = handle.read()
        except OSError as exc:
            raise self._map(exc, key) from exc
        write_id = _parse_header(raw, key, self.url)
        return raw[_HEADER:], Version(write_id)

    def _stat(self, key: str) -> Stat | None:
        try:
            fd = self._open_leaf(key)
            if fd is None:
                return None
            try:
                raw = os.pread(fd, _HEADER, 0)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._map(exc, key) from exc
        write_id = _parse_header(raw, key, self.url)
        return Stat(Version(write_id), write_id)

    def _rename_into_place(self, staged: str, parent: int, leaf: str) -> None:
        _, staging, _ = self._dirs()
        os.rename(staged, leaf, src_dir_fd=staging, dst_dir_fd=parent)

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        try:
            with self._locked(key):
                self._publish(key, data, write_id, self._rename_into_place)
        except OSError as exc:
            raise self._map(exc, key) from exc

    def _delete(self, key: str) -> None:
        names, leaf = _encode(key)
        try:
            with self._locked(key), self._parent(names, create=False) as parent:
                if parent is None:
                    return
                try:
                    os.unlink(leaf, dir_fd=parent)
                except FileNotFoundError:
                    pass
        except OSError as exc:
            raise self._map(exc, key) from exc

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        try:
            with self._locked(key):
                current = self._stat(key)
                if current is None or current.version != version:
                    return Conflict.LOST
                self._publish(key, data, write_id, self._rename_into_place)
        except OSError as exc:
            raise self._map(exc, key) from exc
        return Version(write_id)

    # -- listing ----------------------------------------------------------------------------

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return self._walk(None, "", "", prefix)

    def _walk(
        self, parent: int | None, name: str, base: str, prefix: str
    ) -> Generator[str, None, None]:
        """Yield keys below directory ``name`` of ``parent`` (the root if ``parent`` is None).

        Every key below starts with ``base``. Children are merged lazily by a heap keyed on
        a lower bound of their keys: a leaf's bound is its key, a directory's is its key
        prefix. A subdirectory is opened only when its bound is the smallest, so the walk
        holds few descriptors and yields keys in exact ascending order, even where ``x.c``
        and ``x.d`` siblings interleave.
        """
        try:
            if parent is None:
                fd = os.dup(self._dirs()[0])
            else:
                fd = os.open(name, _O_DIR, dir_fd=parent)
        except OSError as exc:
            if parent is None:
                raise self._map(exc, None) from exc
            return  # vanished, or a planted symlink: never followed
        heap: list[tuple[str, int, int, Generator[str, None, None] | None, str]] = []
        try:
            for order, entry in enumerate(os.listdir(fd)):
                stem, suffix = entry[:-2], entry[-2:]
                if suffix == ".v":
                    bound = base + stem
                    wanted = bound.startswith(prefix)
                elif suffix in (".d", ".c"):
                    bound = base + stem + ("/" if suffix == ".d" else "")
                    wanted = bound.startswith(prefix) or prefix.startswith(bound)
                else:
                    continue  # .tmp, .locks and anything foreign
                if wanted:
                    heap.append((bound, 0 if suffix == ".v" else 1, order, None, entry))
            heapq.heapify(heap)
            while heap:
                bound, _, order, child, entry = heapq.heappop(heap)
                if child is None and entry.endswith(".v"):
                    if self._is_file(fd, entry):
                        yield bound
                    continue
                if child is None:
                    child = self._walk(fd, entry, bound, prefix)
                else:
                    yield bound
                following = next(child, None)
                if following is not None:
                    heapq.heappush(heap, (following, 0, order, child, entry))
        finally:
            for item in heap:
                if item[3] is not None:
                    item[3].close()
            os.close(fd)

    @staticmethod
    def _is_file(fd: int, name: str) -> bool:
        try:
            return stat_mod.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False

    # -- housekeeping -----------------------------------------------------------------------

    def _sweep_staging(self) -> None:
        """Remove staged files whose writer is gone (same host, dead pid) or that are stale."""
        staging_path = os.path.join(self.root, _STAGING)
        now = time.time()
        try:
            names = os.listdir(staging_path)
        except OSError:
            return
        for name in names:
            host, _, rest = name.partition(".")
            pid_text = rest.partition(".")[0]
            path = os.path.join(staging_path, name)
            try:
                stale = now - os.lstat(path).st_mtime > STALE_STAGING_SECONDS
                dead = host == _HOST and pid_text.isdigit() and not _pid_alive(int(pid_text))
                if stale or dead:
                    os.unlink(path)
            except OSError:
                continue


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
