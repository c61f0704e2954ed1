"""file:// specifics: crash safety, no partial reads, traversal and symlinks, staging cleanup."""

from __future__ import annotations

import errno
import fcntl
import multiprocessing as mp
import os
import select
import shutil
import signal
import stat
import threading
import tracemalloc
from collections.abc import Callable
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import pytest

from gradientmail import (
    BackendError,
    BucketNotFoundError,
    ConfigurationError,
    OutcomeUnknownError,
    Version,
    from_url,
)
from gradientmail.backends import _local_layout as local_layout
from gradientmail.backends import _local_staging as local_staging
from gradientmail.backends import local
from gradientmail.backends.local import FileMailbox

BIG = 8 * 1024 * 1024


@pytest.fixture(params=["unnamed", "named"])
def staging(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a staged file is created: unnamed then linked (Linux), or by name."""
    if request.param == "named":
        monkeypatch.setattr(local_staging, "_TMPFILE", 0)
    return str(request.param)


def _stop_mid_write(root: str, operation: str, staged: MpEvent) -> None:
    """Write a new ``BIG`` value to ``k`` by ``operation``, stopping half-way through it.

    The staged file's bytes go through ``os.writev``; this child's copy writes the first
    half of them for real, tells the parent (``staged``) and blocks reading a pipe nobody
    writes to, so the parent's SIGKILL lands while a half-written staged file exists, every
    time. (Not an event: a process killed while waiting on one leaves it unusable.)
    """
    never, _ = os.pipe()
    box = FileMailbox(root)
    _, version = box.get_versioned("k")
    real_writev = os.writev

    def half_then_hang(fd: int, buffers: Any) -> int:
        data = b"".join(bytes(b) for b in buffers)
        half = data[: len(data) // 2]
        done = 0
        while done < len(half):
            done += real_writev(fd, [half[done:]])
        staged.set()
        os.read(never, 1)  # killed here
        raise AssertionError("the parent was to kill this process")

    os.writev = half_then_hang  # this child's only: the parent is another process
    new = b"\x02" * BIG
    if operation == "create":
        box.put_if_absent("new", new)
    elif operation == "overwrite":
        box.put("k", new)
    else:
        box.put_if_match("k", new, version)


def _staged_files_of(pid: int, staging: Path) -> dict[str, int]:
    """The files in ``staging`` that process ``pid`` holds open: link text → size.

    Seen through ``/proc/<pid>/fd``, so a staged file without a name (``O_TMPFILE``)
    shows too, as ``<staging>/#<inode> (deleted)``.
    """
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(f"{staging}/"):
                found[target] = os.stat(f"/proc/{pid}/fd/{fd}").st_size
        except FileNotFoundError:
            continue  # closed meanwhile
    return found


@pytest.mark.parametrize("operation", ["create", "overwrite", "compare-and-swap"])
def test_sigkill_mid_write_leaves_no_partial_key_or_debris(
    tmp_root: str, operation: str, staging: str
) -> None:
    box = FileMailbox(tmp_root)
    old = b"\x01" * BIG
    box.put("k", old)
    _, version = box.get_versioned("k")
    tmp = Path(tmp_root, ".tmp")
    ctx = mp.get_context("fork")
    staged = ctx.Event()
    proc = ctx.Process(target=_stop_mid_write, args=(tmp_root, operation, staged))
    proc.start()
    try:
        assert staged.wait(60), "the writer never got half-way through its staged file"
        assert proc.pid is not None
        # The kill lands mid-write: the writer holds one staged file, half written.
        held = _staged_files_of(proc.pid, tmp)
        assert len(held) == 1, held
        (target, size), header = next(iter(held.items())), len(local_layout.header("0" * 32))
        assert size == (header + BIG) // 2, f"{target}: {size} bytes"
        named = sorted(os.listdir(tmp))
        if staging == "named":
            assert [str(tmp / n) for n in named] == [target]
        else:
            assert named == [], "an unnamed staged file has no name until it is whole"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.exitcode is None:
            proc.kill()  # the test failed before its own kill: never leave the writer
        proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    # A named staged file outlives its writer until a sweep; an unnamed one never had a name.
    assert sorted(os.listdir(tmp)) == named
    reopened = from_url(tmp_root)  # a new handle sweeps the dead writer's staged files
    assert os.listdir(tmp) == [], "the dead writer's staged file was not swept"
    # Nothing of the new value is visible: the old value is whole, its version unchanged.
    assert list(reopened.list()) == ["k"]
    assert reopened.get_versioned("k") == (old, version)  # type: ignore[attr-defined]
    # ... and nothing blocks the next writer.
    assert reopened.put_if_absent("new", b"after")
    assert reopened.put_if_match("k", b"after", version) is not None  # type: ignore[attr-defined]


def test_readers_never_see_a_partial_value(tmp_root: str) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    size = 1024 * 1024
    box.put("k/0", bytes([255]) * size)  # something to read from the first moment
    stop = threading.Event()
    problems: list[str] = []
    errors: list[BaseException] = []
    readers = 2
    reads = [0] * readers
    progress = threading.Condition()

    def read_loop(n: int) -> None:
        reader = FileMailbox(tmp_root, fsync=False)
        try:
            while not stop.is_set():
                for key in reader.list("k/"):
                    value = reader.get(key)
                    if len(value) != size or value.count(value[:1]) != size:
                        problems.append(f"{key}: {len(value)} bytes")
                    with progress:
                        reads[n] += 1
                        progress.notify_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
            with progress:
                progress.notify_all()

    def every_reader_read_since(before: list[int]) -> bool:
        """Wait (bounded) until each reader has finished a read begun after ``before``."""

        def caught_up() -> bool:
            return bool(errors) or all(r > b + 1 for r, b in zip(reads, before, strict=True))

        with progress:
            return progress.wait_for(caught_up, 30)

    threads = [threading.Thread(target=read_loop, args=(n,)) for n in range(readers)]
    for t in threads:
        t.start()
    overlapping = 0
    try:
        for i in range(60):
            before = list(reads)
            box.put_if_absent(f"k/{i}", bytes([i]) * size)
            box.put(f"k/{i % 5}", bytes([i + 1]) * size)
            if i % 10 == 9:
                # The readers keep up with the writes, so reads and writes overlap all along.
                assert every_reader_read_since(before), f"a reader stalled: {reads}"
                overlapping += 1
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not [t for t in threads if t.is_alive()], "a reader hung"
    if errors:
        raise errors[0]
    assert overlapping == 6
    assert all(r > 0 for r in reads), reads
    assert problems == []


def test_key_file_layout_keeps_parent_and_child(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    box.put("a", b"1")
    box.put("a/b", b"2")
    assert sorted(os.listdir(tmp_root)) == [".locks", ".tmp", "a.d", "a.v"]


def test_internal_names_cannot_be_reached_by_keys(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    box.put(".tmp", b"user key named .tmp")
    box.put(".locks/00", b"user key under .locks")
    assert box.get(".tmp") == b"user key named .tmp"
    assert list(box.list()) == [".locks/00", ".tmp"]
    assert os.path.isdir(os.path.join(tmp_root, ".tmp"))


def _snapshot(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def test_symlinked_directory_inside_root_is_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.v").write_bytes(b"GM1 " + b"0" * 32 + b"\nsecret")
    box = FileMailbox(str(root))
    os.symlink(outside, root / "evil.d")
    before = _snapshot(outside)
    with pytest.raises(BackendError, match="symbolic link"):
        box.put_if_absent("evil/x", b"escape")
    with pytest.raises(BackendError, match="symbolic link"):
        box.put("evil/secret", b"overwrite")
    with pytest.raises(BackendError, match="symbolic link"):
        box.get("evil/secret")
    with pytest.raises(BackendError, match="symbolic link"):
        box.delete("evil/secret")
    assert list(box.list()) == []
    assert _snapshot(outside) == before


def test_symlinked_value_file_is_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    target = outside / "target"
    target.write_bytes(b"GM1 " + b"0" * 32 + b"\nprecious")
    box = FileMailbox(str(root))
    os.symlink(target, root / "link.v")
    with pytest.raises(BackendError, match="symbolic link"):
        box.get("link")
    with pytest.raises(BackendError, match="symbolic link"):  # not a value: nobody "won" it
        box.put_if_absent("link", b"x")
    box.put("link", b"replaced")  # replaces the link itself, never its target
    assert box.get("link") == b"replaced"
    assert target.read_bytes().endswith(b"precious")
    assert not (root / "link.v").is_symlink()


@pytest.mark.parametrize("key", ["../x", "a/../../x", "/etc/passwd", "..", "a/./b"])
def test_traversal_keys_are_rejected_and_nothing_changes(tmp_path: Path, key: str) -> None:
    root = tmp_path / "root"
    box = FileMailbox(str(root))
    before = _snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"segment|start with"):
        box.put(key, b"escape")
    assert _snapshot(tmp_path) == before


def test_staged_files_are_invisible_and_swept_once_their_lock_is_free(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    staging = Path(tmp_root, ".tmp")
    (staging / f"{local._HOST}.{os.getpid()}.crashed").write_bytes(b"partial")
    (staging / f"{local._HOST}.{os.getpid()}.crashed-before-writing").write_bytes(b"")
    alive = staging / f"{local._HOST}.{os.getpid()}.alive"
    alive.write_bytes(b"in progress")
    writer = os.open(alive, os.O_RDONLY)
    try:
        fcntl.flock(writer, fcntl.LOCK_EX)  # what a live writer holds while it writes
        assert list(box.list()) == []
        FileMailbox(tmp_root)
        assert os.listdir(staging) == [alive.name]
    finally:
        os.close(writer)
    FileMailbox(tmp_root)
    assert os.listdir(staging) == []


def test_foreign_file_in_root_is_reported_not_misread(tmp_root: str) -> None:
    Path(tmp_root, "hand.v").write_bytes(b"written by hand")
    box = FileMailbox(tmp_root)
    with pytest.raises(BackendError, match="header"):
        box.get("hand")


def test_file_url_forms(tmp_path: Path) -> None:
    assert from_url(str(tmp_path / "a")).url == f"file://{tmp_path}/a"
    assert from_url(f"file://{tmp_path}/b").url == f"file://{tmp_path}/b"
    assert from_url(f"file://localhost{tmp_path}/c").url == f"file://{tmp_path}/c"
    with pytest.raises(ConfigurationError, match="not host"):
        from_url("file://server/share")
    with pytest.raises(ConfigurationError, match="fsync"):
        from_url(f"file://{tmp_path}/d?fsync=maybe")
    assert from_url(f"file://{tmp_path}/e?fsync=false").fsync is False  # type: ignore[attr-defined]


# -- hostile entries inside the root ---------------------------------------------------------

DEAD_PID = 2**22 + 12345  # above pid_max on Linux, so never alive in this namespace


def _ancient(path: Path) -> None:
    os.utime(path, (0, 0))


@pytest.mark.parametrize("internal", [".tmp", ".locks"])
def test_a_symlinked_internal_directory_is_refused_and_nothing_outside_is_touched(
    tmp_path: Path, internal: str
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    for name in ("old-1", "old-2", "00", f"{local._HOST}.{DEAD_PID}.feed"):
        (outside / name).write_bytes(b"not gradientmail's")
        _ancient(outside / name)
    os.symlink(outside, root / internal)
    before = _snapshot(outside)
    with pytest.raises(BackendError, match="symbolic link") as info:
        from_url(str(root)).put("k", b"v")
    assert str(root / internal) in str(info.value)
    assert "remove" in str(info.value)
    assert _snapshot(outside) == before


def test_the_staging_sweep_never_follows_entries_out_of_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    FileMailbox(str(root))
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep")
    _ancient(outside / "precious")
    os.symlink(outside / "precious", root / ".tmp" / f"{local._HOST}.{DEAD_PID}.link")
    os.symlink(outside, root / ".tmp" / f"{local._HOST}.{DEAD_PID}.dirlink")
    FileMailbox(str(root))
    assert (outside / "precious").read_bytes() == b"keep"


def _bounded(call: Callable[[], object], seconds: float = 10.0) -> BaseException | None:
    """Run ``call`` in a thread; fail if it is still running after ``seconds``."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call blocked for more than {seconds} s"
    return outcome[0]


def _unblock_fifo(path: Path) -> None:
    try:  # releases a reader stuck in open(); harmless when nobody is
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def test_a_fifo_planted_at_a_value_file_fails_at_once_and_frees_its_lock(tmp_root: str) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    box.put("k", b"v")
    _, version = box.get_versioned("k")
    fifo = Path(tmp_root, "k.v")
    fifo.unlink()
    os.mkfifo(fifo)
    try:
        for call in (
            lambda: box.get("k"),
            lambda: box.get_versioned("k"),
            lambda: box.put_if_match("k", b"w", version),
            lambda: box.put_if_absent("k", b"w"),
        ):
            error = _bounded(call)
            assert isinstance(error, BackendError), error
            assert "FIFO" in str(error)
            assert str(fifo) in str(error)
    finally:
        _unblock_fifo(fifo)
    assert _bounded(lambda: box.put("k", b"repaired")) is None  # the key's lock stripe is free
    assert box.get("k") == b"repaired"


def test_fifos_planted_at_the_lock_stripes_are_refused_without_blocking(tmp_root: str) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    locks = Path(tmp_root, ".locks")
    for stripe in range(256):
        name = locks / f"{stripe:02x}"
        name.unlink(missing_ok=True)
        os.mkfifo(name)
    error = _bounded(lambda: box.put("k", b"v"))
    assert isinstance(error, BackendError), error
    assert "FIFO" in str(error)
    assert str(locks) in str(error)
    assert _bounded(lambda: box.put_if_absent("other", b"v")) is None  # needs no lock


def test_a_symlinked_lock_file_never_creates_a_file_outside_the_root(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    box = FileMailbox(str(root), fsync=False)
    for stripe in range(256):
        name = root / ".locks" / f"{stripe:02x}"
        name.unlink(missing_ok=True)
        os.symlink(outside / f"{stripe:02x}", name)
    with pytest.raises(BackendError, match="symbolic link"):
        box.put("k", b"v")
    assert list(outside.iterdir()) == []


def test_a_directory_moved_out_of_the_root_receives_no_more_writes(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    box = FileMailbox(str(root), fsync=False)
    box.put("a/b", b"1")
    box.get("a/b")
    os.rename(root / "a.d", outside / "a.d")
    box.put("a/c", b"2")
    box.put_if_absent("a/d", b"3")
    assert sorted(os.listdir(outside / "a.d")) == ["b.v"]
    assert list(box.list()) == ["a/c", "a/d"]


def test_internal_directories_moved_out_of_the_root_receive_no_more_writes(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    box = FileMailbox(str(root), fsync=False)
    box.put("k", b"1")
    os.rename(root / ".locks", outside / "locks")
    os.rename(root / ".tmp", outside / "tmp")
    os.rmdir(outside / "tmp")  # a value staged through a stale descriptor would now fail
    locks_before = sorted(os.listdir(outside / "locks"))
    for i in range(20):
        box.put(f"key-{i}", b"2")
    box.put_if_absent("new", b"3")
    assert sorted(os.listdir(outside / "locks")) == locks_before
    assert box.get("key-19") == b"2"
    assert os.listdir(root / ".tmp") == []


def test_a_hard_linked_value_file_is_replaced_never_written_through(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    box = FileMailbox(str(root), fsync=False)
    box.put("k", b"mine")
    os.link(root / "k.v", outside / "linked")  # the same inode, reachable from outside
    _, version = box.get_versioned("k")
    box.put_if_match("k", b"compare-and-swapped", version)
    box.put("k", b"overwritten")
    box.delete("k")
    assert (outside / "linked").read_bytes().endswith(b"mine")


def test_a_fifo_where_a_key_directory_belongs_is_refused_without_blocking(tmp_root: str) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    os.mkfifo(Path(tmp_root, "a.d"))
    for call in (
        lambda: box.put("a/b", b"v"),
        lambda: box.put_if_absent("a/b", b"v"),
        lambda: box.get("a/b"),
    ):
        error = _bounded(call)
        assert isinstance(error, BackendError), error
        assert "a.d is not a directory" in str(error)
    assert _bounded(lambda: list(box.list())) is None


# -- threads sharing one handle ----------------------------------------------------------------


@pytest.mark.parametrize("writers", [0, 2], ids=["no-writers", "with-writers"])
def test_threads_sharing_one_handle_list_correctly(tmp_root: str, writers: int) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    expected = [f"k{i:04d}" for i in range(1500)]
    for key in expected:
        box.put(key, b"")
    listers, rounds = 12, 12
    start = threading.Barrier(listers + writers)
    stop = threading.Event()
    wrong: list[str] = []

    def lister() -> None:
        start.wait()
        for _ in range(rounds):
            keys = list(box.list())
            if [k for k in keys if k.startswith("k")] != expected or keys != sorted(set(keys)):
                wrong.append(f"{len(keys)} keys, first {keys[:3]}")

    def writer(n: int) -> None:
        start.wait()
        i = 0
        while not stop.is_set():
            box.put(f"w{n}-{i % 50}", b"x")
            i += 1

    threads = [threading.Thread(target=lister) for _ in range(listers)]
    busy = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for thread in threads + busy:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    for thread in busy:
        thread.join()
    assert wrong == [], f"{len(wrong)} of {listers * rounds} listings were wrong: {wrong[:3]}"


# -- list() streams within one directory -------------------------------------------------------


def _write_raw(root: str, names: list[str]) -> None:
    header = b"GM1 " + b"0" * 32 + b"\n"
    for name in names:
        Path(root, name).write_bytes(header)


def test_list_holds_a_bounded_number_of_names_from_one_directory(
    tmp_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 5,000 names held at once take over 500 kB; one chunk of 25 takes a few kB.
    monkeypatch.setattr(local_layout, "LIST_CHUNK", 25)
    box = FileMailbox(tmp_root, fsync=False)
    keys = [f"key-{i:06d}-{'x' * 40}" for i in range(5_000)]
    _write_raw(tmp_root, [k + ".v" for k in keys])
    listing = box.list()
    tracemalloc.start()
    try:
        first = next(listing)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == keys[0]
    assert peak < 150_000, f"{peak} bytes held before the first key of 5,000"
    assert [first, *listing] == keys


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_list_in_small_chunks_keeps_exact_ascending_order(
    tmp_root: str, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(local_layout, "LIST_CHUNK", chunk)
    box = FileMailbox(tmp_root, fsync=False)
    long = "L" * 250  # longer than one directory entry: split into .c pieces
    keys = {
        "a", "a/b", "a/b/c", "a!", "a0", "b", long, long + "/x", long + "!", long + "0",
        long[:240], long[:240] + "/y", *(f"n/{i:03d}" for i in range(40)), "n!", "n0",
    }  # fmt: skip
    for key in keys:
        box.put(key, b"")
    assert list(box.list()) == sorted(keys)
    for prefix in ("a", "a/", "n/0", long[:245], "zz"):
        assert list(box.list(prefix)) == sorted(k for k in keys if k.startswith(prefix))


# -- staging liveness does not rest on pids ----------------------------------------------------


def _write_while_paused(root: str, staged: MpEvent, resume: MpEvent) -> None:
    os.getpid = lambda: DEAD_PID  # as seen from another PID namespace: a pid that looks dead
    real_link = local.os.link

    def paused_link(*args: Any, **kwargs: Any) -> None:
        if "src_dir_fd" in kwargs:  # placing the staged value: it is whole, in .tmp, locked
            staged.set()
            assert resume.wait(30)
        real_link(*args, **kwargs)

    local.os.link = paused_link  # type: ignore[assignment]
    FileMailbox(root).put_if_absent("k", b"from the paused writer")


def test_the_sweep_keeps_a_live_writers_staged_file_whose_pid_looks_dead(
    tmp_root: str, staging: str
) -> None:
    ctx = mp.get_context("fork")
    staged, resume = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_write_while_paused, args=(tmp_root, staged, resume))
    writer.start()
    try:
        assert staged.wait(30), "the writer never staged its value"
        assert os.listdir(Path(tmp_root, ".tmp")), "nothing staged"
        FileMailbox(tmp_root)  # opening sweeps .tmp while the writer is mid-write
    finally:
        resume.set()
        writer.join(30)
    assert writer.exitcode == 0, "the writer lost its staged file to the sweep"
    assert FileMailbox(tmp_root).get("k") == b"from the paused writer"


def _write_many_with_a_dead_looking_pid(root: str, count: int) -> None:
    os.getpid = lambda: DEAD_PID  # as seen from another PID namespace
    box = FileMailbox(root, fsync=False)
    for i in range(count):
        box.put_if_absent(f"claim/{i}", b"x" * 4096)
        box.put(f"progress/{i % 7}", b"y" * 4096)


def test_opens_in_another_process_never_break_a_busy_writers_writes(
    tmp_root: str, staging: str
) -> None:
    ctx = mp.get_context("fork")
    writer = ctx.Process(target=_write_many_with_a_dead_looking_pid, args=(tmp_root, 400))
    writer.start()
    opens = 0
    while writer.is_alive() or opens == 0:
        FileMailbox(tmp_root)  # each open sweeps .tmp while the writer stages values there
        opens += 1
    writer.join()
    assert writer.exitcode == 0, f"a write failed while {opens} opens swept .tmp"
    box = FileMailbox(tmp_root)
    assert len(list(box.list("claim/"))) == 400
    assert os.listdir(Path(tmp_root, ".tmp")) == []


# -- fork ----------------------------------------------------------------------------------------


def test_fork_during_a_write_neither_hangs_the_child_nor_stalls_the_parent(tmp_root: str) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    box.put("hot", b"0")
    done = threading.Condition()
    puts = [0]
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            box.put("hot", b"x" * 65536)
            with done:
                puts[0] += 1
                done.notify_all()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(10):
            with done:
                done.wait_for(lambda: puts[0] > 0, timeout=10)
            child_done, child_out = os.pipe()
            release_in, release = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: one write on the hot key's lock stripe, then wait
                code = 1
                try:
                    box.put("hot", b"child")
                    box.put("child", b"child")
                    os.write(child_out, b"ok")
                    os.read(release_in, 1)
                    code = 0
                finally:
                    os._exit(code)
            os.close(child_out)
            os.close(release_in)
            try:
                ready, _, _ = select.select([child_done], [], [], 20)
                assert ready, "the forked child hung"
                assert os.read(child_done, 2) == b"ok", "the forked child failed"
                with done:
                    target = puts[0] + 3
                    progressed = done.wait_for(lambda t=target: puts[0] >= t, timeout=20)
                assert progressed, "the parent's put stalled while the child lives"
            finally:
                os.close(release)
                try:
                    if os.waitpid(pid, os.WNOHANG) == (0, 0):
                        os.kill(pid, signal.SIGKILL)
                except ChildProcessError:
                    pass
                os.waitpid(pid, 0) if _alive(pid) else None
                os.close(child_done)
    finally:
        stop.set()
        thread.join(30)


def _alive(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


# -- typed errors --------------------------------------------------------------------------------


def _every_call(box: FileMailbox, version: Version) -> list[Callable[[], object]]:
    return [
        lambda: box.put_if_absent("a/b", b"2"),
        lambda: box.put_if_absent("new", b"2"),
        lambda: box.put("a/b", b"2"),
        lambda: box.get("a/b"),
        lambda: box.get_versioned("a/b"),
        lambda: box.put_if_match("a/b", b"2", version),
        lambda: box.delete("a/b"),
        lambda: list(box.list()),
    ]


def test_every_call_on_a_removed_root_raises_a_typed_error(tmp_path: Path) -> None:
    root = tmp_path / "root"
    used = FileMailbox(str(root), fsync=False)
    used.put("a/b", b"1")
    _, version = used.get_versioned("a/b")
    fresh = FileMailbox(str(root), fsync=False)
    shutil.rmtree(root)
    for box in (used, fresh):
        for call in _every_call(box, version):
            with pytest.raises(BucketNotFoundError, match="removed"):
                call()
    assert not root.exists()


def test_a_failed_directory_fsync_after_the_write_landed_is_outcome_unknown(
    tmp_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = FileMailbox(tmp_root)
    box.put("cas", b"0")
    _, version = box.get_versioned("cas")
    real_fsync = os.fsync

    def failing_dir_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(local.os, "fsync", failing_dir_fsync)
    with pytest.raises(OutcomeUnknownError, match="read the key back"):
        box.put_if_absent("k", b"mine")
    with pytest.raises(OutcomeUnknownError, match="read the key back"):
        box.put_if_match("cas", b"1", version)
    monkeypatch.undo()
    assert box.get("k") == b"mine"  # it landed: a retry's False would have been a lie
    assert box.get("cas") == b"1"
    assert os.listdir(Path(tmp_root, ".tmp")) == []
