"""file:// specifics: crash safety, no partial reads, traversal and symlinks, staging cleanup."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from pathlib import Path

import pytest

from gradientmail import BackendError, ConfigurationError, from_url
from gradientmail.backends.local import FileMailbox

BIG = 8 * 1024 * 1024


def _writer(root: str, started: mp.synchronize.Event, fsync: bool) -> None:  # type: ignore[name-defined]
    box = from_url(root, fsync=fsync)
    i = 0
    while True:
        value = bytes([i % 256]) * BIG
        box.put_if_absent(f"big/{i:06d}", value)
        box.put(f"over/{i % 3}", value)
        i += 1
        if i == 3:
            started.set()  # three whole writes done; the parent kills us mid-way in later ones


@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "no-fsync"])
def test_sigkill_mid_write_leaves_no_partial_key_or_debris(tmp_root: str, fsync: bool) -> None:
    ctx = mp.get_context("fork")
    started = ctx.Event()
    proc = ctx.Process(target=_writer, args=(tmp_root, started, fsync))
    proc.start()
    assert started.wait(60), "writer never completed three writes"
    os.kill(proc.pid, signal.SIGKILL)  # without warning, while it writes 8 MiB values
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    staged_before = os.listdir(os.path.join(tmp_root, ".tmp"))
    reopened = from_url(tmp_root)  # a new handle sweeps the dead writer's staged files
    keys = list(reopened.list())
    assert keys, "the writer stored nothing before the kill"
    for key in keys:
        value = reopened.get(key)
        assert len(value) == BIG, f"{key} holds {len(value)} bytes: a partial value is visible"
        assert value == bytes([value[0]]) * BIG
    assert all(k.startswith(("big/", "over/")) for k in keys)
    assert os.listdir(os.path.join(tmp_root, ".tmp")) == [], (
        f"staged debris left after reopen (before: {staged_before})"
    )


def test_readers_never_see_a_partial_value(tmp_root: str) -> None:
    box = FileMailbox(tmp_root, fsync=False)
    stop = threading.Event()
    size = 1024 * 1024
    problems: list[str] = []

    def read_loop() -> None:
        reader = FileMailbox(tmp_root, fsync=False)
        while not stop.is_set():
            for key in reader.list("k/"):
                value = reader.get(key)
                if len(value) != size or value.count(value[:1]) != size:
                    problems.append(f"{key}: {len(value)} bytes")

    threads = [threading.Thread(target=read_loop) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(60):
            box.put_if_absent(f"k/{i}", bytes([i]) * size)
            box.put(f"k/{i % 5}", bytes([i + 1]) * size)
    finally:
        stop.set()
        for t in threads:
            t.join()
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
    assert box.put_if_absent("link", b"x") is False  # the name is taken; nothing is written
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


def test_stale_staged_files_are_invisible_and_swept(tmp_root: str) -> None:
    box = FileMailbox(tmp_root)
    staging = Path(tmp_root, ".tmp")
    dead_pid = 2**22 + 12345  # above pid_max on Linux, so never alive
    from gradientmail.backends import local

    (staging / f"{local._HOST}.{dead_pid}.deadbeef").write_bytes(b"partial")
    (staging / f"{local._HOST}.{os.getpid()}.alive").write_bytes(b"in progress")
    assert list(box.list()) == []
    FileMailbox(tmp_root)
    assert sorted(os.listdir(staging)) == [f"{local._HOST}.{os.getpid()}.alive"]


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
