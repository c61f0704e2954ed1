"""What the mailbox pipeline tests run: producers and consumers, in threads or processes.

Module-level functions, so that spawned processes can import them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from gradientmail import from_url
from gradientmail.patterns.pipeline import Pipeline

JOIN = 60.0  # seconds; a thread or process still alive after this is a hang
#: Quick failure detection for tests: a beat every 0.1 s, lost after 3 s of silence (a margin
#: for a loaded 2-core machine, where a live heartbeat thread can be late).
FAST: dict[str, Any] = {"heartbeat_interval": 0.1, "lease": 3.0, "poll_interval": 0.01}


class Boom(RuntimeError):
    pass


def payload(producer: str, seq: int) -> bytes:
    return f"{producer}/{seq}|".encode() + bytes(seq % 251 for _ in range(64))


def parse(item: bytes) -> tuple[str, int]:
    head = item.split(b"|", 1)[0].decode()
    producer, seq = head.split("/")
    assert item == payload(producer, int(seq)), "the bytes arrived intact"
    return producer, int(seq)


def open_pipe(url: str, names: list[str], options: dict[str, Any] | None = None, **kw: Any) -> Any:
    return Pipeline.over_mailbox(from_url(url, **(options or {})), names, **kw)


def produce(
    url: str,
    names: list[str],
    name: str,
    count: int,
    *,
    options: dict[str, Any] | None = None,
    delay: float = 0.0,
    fail_after: int | None = None,
    pipe_options: dict[str, Any] | None = None,
) -> None:
    """One producer: ``count`` items, ``delay`` seconds of simulated work before each."""
    pipe = open_pipe(url, names, options, **(pipe_options or {}))
    with pipe.producer(name) as out:
        for seq in range(count):
            if fail_after is not None and seq == fail_after:
                raise Boom(f"{name} broke at item {seq}")
            if delay:
                time.sleep(delay)  # stands in for generating a chunk
            out.put(payload(name, seq))


def consume(
    url: str,
    names: list[str],
    consumer: str,
    options: dict[str, Any] | None = None,
    pipe_options: dict[str, Any] | None = None,
) -> list[tuple[str, int]]:
    pipe = open_pipe(url, names, options, **(pipe_options or {}))
    with pipe.consumer(consumer) as items:
        return [parse(item) for item in items]


def drain(
    pipe: Pipeline[bytes],
    got: list[tuple[str, int]],
    on_item: Callable[[list[tuple[str, int]]], None] = lambda got: None,
) -> None:
    """Consume into ``got``, so that what arrived before an error can be checked."""
    with pipe.consumer("c") as items:
        for item in items:
            got.append(parse(item))
            on_item(got)


def consume_to_queue(url: str, names: list[str], consumer: str, out: Any) -> None:
    try:
        out.put((consumer, consume(url, names, consumer), None))
    except BaseException as exc:  # noqa: BLE001 - reported to the test as text
        out.put((consumer, [], f"{type(exc).__name__}: {exc}"))


def produce_and_report(
    url: str,
    names: list[str],
    name: str,
    count: int,
    out: Any,
    options: dict[str, Any] | None = None,
) -> None:
    try:
        pipe_options = {"stall_timeout": 30, **FAST}
        produce(url, names, name, count, options=options, delay=0.02, pipe_options=pipe_options)
        out.put(None)
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        out.put(f"{type(exc).__name__}: {exc}")


def spawn(target: Any, *args: Any, **kwargs: Any) -> mp.process.BaseProcess:
    process = mp.get_context("spawn").Process(target=target, args=args, kwargs=kwargs)
    process.start()
    return process


def reap(processes: list[mp.process.BaseProcess]) -> None:
    for process in processes:
        process.join(JOIN)
    alive = [p.name for p in processes if p.is_alive()]
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    assert not alive, f"processes still running (a hang): {alive}"


def run_threads(*targets: tuple[Any, tuple[Any, ...], dict[str, Any]]) -> list[BaseException]:
    """Run ``(function, args, kwargs)`` each in its own thread; return what they raised."""
    errors: list[BaseException] = []

    def run(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=t) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    assert not [t for t in threads if t.is_alive()], "a thread hung"
    return errors


def assert_exactly_once(taken: list[tuple[str, int]], counts: dict[str, int]) -> None:
    duplicates = [item for item, n in Counter(taken).items() if n > 1]
    assert not duplicates, f"delivered twice: {duplicates[:5]}"
    expected = {(p, s) for p, n in counts.items() for s in range(n)}
    missing = expected - set(taken)
    assert not missing, f"lost: {sorted(missing)[:5]} ({len(missing)} in all)"
    assert set(taken) == expected


def consumer_victim(
    url: str,
    names: list[str],
    consumer: str,
    log_path: str,
    stop_after: int,
    stop_signal: int,
    ready: Any,
    options: dict[str, Any] | None = None,
    pipe_options: dict[str, Any] | None = None,
    step_s: float = 0.005,
    signalling: Any = None,
) -> None:
    """A consumer process that signals itself (SIGKILL, SIGSTOP) after ``stop_after`` items,
    each taking ``step_s`` seconds of the loop; sets ``signalling`` (an event, if given)
    just before.

    Sets ``ready`` once its consumer is open. Each item ``next()`` returned is appended to
    ``log_path`` before anything else happens; at the ``stop_after``-th, the process waits
    until it has claimed at least one item more (decode runs after the claim, on the
    prefetch thread), so that it holds prefetched items when the signal lands. After a
    SIGSTOP it resumes where it was, and logs what its iteration ended with: ``end`` or the
    error's type and message.
    """
    decoded = 0
    holds_more = threading.Event()

    def decode(data: bytes) -> bytes:
        nonlocal decoded
        decoded += 1
        if decoded > stop_after:
            holds_more.set()
        return data

    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    outcome = "end"
    try:
        pipe = open_pipe(url, names, options, **(pipe_options or {}))
        with pipe.consumer(consumer, decode=decode) as items:
            ready.set()
            for n, item in enumerate(items, 1):
                producer, seq = parse(item)
                os.write(fd, f"item {producer} {seq}\n".encode())
                if n == stop_after:
                    holds_more.wait(JOIN)
                    if signalling is not None:
                        signalling.set()
                    os.kill(os.getpid(), stop_signal)
                time.sleep(step_s)  # stands in for a training step
    except BaseException as exc:  # noqa: BLE001 - reported to the test through the log
        outcome = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    finally:
        os.write(fd, f"outcome {outcome}\n".encode())
        os.close(fd)


def read_victim_log(log_path: str) -> tuple[list[tuple[str, int]], str | None]:
    """The items a :func:`consumer_victim` logged, and its outcome line (if it got there)."""
    taken: list[tuple[str, int]] = []
    outcome = None
    with open(log_path, encoding="utf-8") as log:
        for line in log:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "item":
                producer, seq = rest.rsplit(" ", 1)
                taken.append((producer, int(seq)))
            else:
                outcome = rest
    return taken, outcome
