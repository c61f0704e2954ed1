"""How ``file://`` keys map to names on disk, and how ``list`` reads them back in order.

Each key segment becomes a directory ``SEG.d`` and the last one a file ``SEG.v``, so ``a``
and ``a/b`` coexist (``a.v`` beside ``a.d/b.v``). Segments longer than :data:`CHUNK_BYTES`
are split into ``PART.c`` directories, so 1024-byte keys fit under any ``NAME_MAX``.
Names without one of these suffixes (``.tmp``, ``.locks``, anything foreign) are never
keys. Every value file starts with a header (:func:`header`) carrying the write id that
stored it.

Listing streams: :func:`walk` reads one directory at a time and, within a directory, holds
at most :data:`LIST_CHUNK` names. A larger directory is read in several passes, each
keeping the next :data:`LIST_CHUNK` names in key order, so memory stays bounded; the cost
is one more read of the directory per :data:`LIST_CHUNK` keys in it.

A partial listing (``start_after``) starts in the walk: an entry whose keys all sort at or
before ``start_after`` is dropped as its directory is read, so it is never held, opened or
yielded; only the directories on the path to ``start_after`` are entered with the bound.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Generator

from gradientmail.backends._local_fs import O_DIR

__all__ = ["CHUNK_BYTES", "HEADER_BYTES", "LIST_CHUNK", "encode", "header", "parse_header", "walk"]

_MAGIC = b"GM1 "
#: Every value file starts with a header: magic, the 32-hex write id that stored it, "\\n".
HEADER_BYTES = len(_MAGIC) + 32 + 1
#: Longest segment piece stored in one directory entry (well under every NAME_MAX).
CHUNK_BYTES = 240
#: Most names of one directory that ``list`` holds in memory at once.
LIST_CHUNK = 10_000

_LEAF, _DIR = 0, 1
#: (lower bound of the keys below, _LEAF or _DIR, entry name): unique within a directory.
_Entry = tuple[str, int, str]
_Keys = Generator[str, None, None]


def _pieces(segment: str) -> list[str]:
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


def encode(key: str) -> tuple[list[str], str]:
    """Map a valid key to (directory names from the root, leaf file name)."""
    names: list[str] = []
    segments = key.split("/")
    for index, segment in enumerate(segments):
        pieces = _pieces(segment)
        names.extend(piece + ".c" for piece in pieces[:-1])
        names.append(pieces[-1] + (".v" if index == len(segments) - 1 else ".d"))
    return names[:-1], names[-1]


def header(write_id: str) -> bytes:
    """The header a value file starts with."""
    return _MAGIC + write_id.encode("ascii") + b"\n"


def parse_header(raw: bytes) -> str | None:
    """The write id in the header ``raw`` starts with, or ``None`` if it has none."""
    if len(raw) < HEADER_BYTES or not raw.startswith(_MAGIC) or raw[HEADER_BYTES - 1] != 10:
        return None
    return raw[len(_MAGIC) : HEADER_BYTES - 1].decode("ascii", errors="replace")


def walk(fd: int, base: str, prefix: str, start_after: str | None = None) -> _Keys:
    """Yield the keys stored below the directory ``fd`` that start with ``prefix``, in order.

    With ``start_after``, only the keys sorting strictly after it: exactly the keys of the
    walk without it that are ``> start_after``, in the same order. ``start_after`` must
    start with ``base`` (the walk of the root has ``base == ""``).

    ``fd`` is owned by the walk, which closes it. Every key below starts with ``base``,
    and ``base`` and ``prefix`` agree (one starts with the other). Entries are merged by a
    heap keyed on a lower bound of their keys (relative to ``base``): a leaf's bound is its
    key, a directory's is its key prefix. A subdirectory is opened only when its bound is
    the smallest, so the walk holds few descriptors and yields keys in exact ascending
    order, even where ``x.c`` and ``x.d`` siblings interleave. Entries are read
    :data:`LIST_CHUNK` at a time; the next chunk is read as soon as the heap's smallest
    item is past the last entry read, since an unread entry might come before it.
    """
    heap: list[tuple[str, int, str, _Keys | None]] = []
    wanted = prefix[len(base) :]  # what the rest of a key below must start with
    after = None if start_after is None else start_after[len(base) :]  # the same, relative
    try:
        last: _Entry | None = None
        more = True
        while True:
            if more and (not heap or last is None or heap[0][:3] > last):
                chunk, more = _read_chunk(fd, wanted, last, after)
                if chunk:
                    last = chunk[-1]
                    heap.extend((*entry, None) for entry in chunk)
                    heapq.heapify(heap)
                continue
            if not heap:
                return
            bound, kind, name, child = heapq.heappop(heap)
            if child is None:
                if kind == _LEAF:
                    yield base + bound
                    continue
                # Entered with the bound only on its path; any other kept entry sorts
                # wholly after it (_read_chunk dropped those wholly before it).
                on_path = after is not None and after.startswith(bound)
                child = _walk_below(
                    fd, name, base + bound, prefix, start_after if on_path else None
                )
                following = next(child, None)
            else:
                yield base + bound
                following = next(child, None)
            if following is not None:
                heapq.heappush(heap, (following[len(base) :], _LEAF, name, child))
    finally:
        for item in heap:
            if item[3] is not None:
                item[3].close()
        os.close(fd)


def _walk_below(parent: int, name: str, base: str, prefix: str, start_after: str | None) -> _Keys:
    try:
        fd = os.open(name, O_DIR, dir_fd=parent)
    except OSError:
        return  # vanished, or replaced by a link: never followed
    yield from walk(fd, base, prefix, start_after)


def _wholly_before(item: _Entry, start_after: str) -> bool:
    """Whether every key of entry ``item`` sorts at or before ``start_after`` (relative).

    A leaf holds one key, its bound. A directory holds keys that start with its bound
    ``b``: all of them sort before ``start_after`` when ``b`` does and is not a leading
    part of it (they then differ at a character inside ``b``, where ``b``'s is smaller);
    when ``b`` is a leading part, some keys below may sort after it.
    """
    bound, kind = item[0], item[1]
    if kind == _LEAF:
        return bound <= start_after
    return bound < start_after and not start_after.startswith(bound)


def _read_chunk(
    fd: int, wanted: str, after: _Entry | None, start_after: str | None = None
) -> tuple[list[_Entry], bool]:
    """The next :data:`LIST_CHUNK` entries after ``after`` in order, and whether more remain.

    Bounds are relative to the directory; only entries that may hold keys starting with
    ``wanted`` count, and, with ``start_after`` (relative too), only entries that may hold
    keys sorting after it.
    """
    limit = LIST_CHUNK
    chunk: list[_Entry] = []
    cutoff: _Entry | None = None  # once full: only entries before this can still join
    more = False
    own = os.open(".", O_DIR, dir_fd=fd)  # a read position of its own, shared with no thread
    try:
        with os.scandir(own) as entries:
            for entry in entries:
                name = entry.name
                suffix = name[-2:]
                if suffix == ".v":
                    item = (name[:-2], _LEAF, name)
                    if not item[0].startswith(wanted):
                        continue
                elif suffix in (".d", ".c"):
                    item = (name[:-2] + "/" if suffix == ".d" else name[:-2], _DIR, name)
                    if not (item[0].startswith(wanted) or wanted.startswith(item[0])):
                        continue
                else:
                    continue  # .tmp, .locks and anything foreign
                if after is not None and item <= after:
                    continue
                if start_after is not None and _wholly_before(item, start_after):
                    continue
                if cutoff is not None and item >= cutoff:
                    more = more or item > cutoff
                    continue
                # A value must be a regular file, a directory a directory: never a link.
                if item[1] == _LEAF:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                elif not entry.is_dir(follow_symlinks=False):
                    continue
                chunk.append(item)
                if len(chunk) >= 2 * limit:
                    chunk, more = _keep_first(chunk, limit, more)
                    cutoff = chunk[-1]
    finally:
        os.close(own)
    return _keep_first(chunk, limit, more)


def _keep_first(chunk: list[_Entry], limit: int, more: bool) -> tuple[list[_Entry], bool]:
    # A directory changed while it is read may repeat an entry: keep each once.
    chunk = sorted(set(chunk))
    if len(chunk) > limit:
        return chunk[:limit], True
    return chunk, more
