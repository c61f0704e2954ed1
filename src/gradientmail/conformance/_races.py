"""Races with real concurrency: the evidence that a store's conditional writes are atomic.

Both races run with real threads or real processes. Each process unpickles its own copy of
the mailbox, so it has its own client, connections and descriptors, as separate machines
would. All racers go for the same keys in the same order, and wait on a shared barrier
before each key, so they collide on every key at nearly the same moment.

* :func:`race_put_if_absent`: N racers × K keys. Exactly one ``True`` per key, and the
  stored bytes are the winner's. A racer whose call raises ``OutcomeUnknownError`` (the
  contract allows it after a lost response) goes on to the next key; its key is then
  judged by the bytes stored.
* :func:`cas_counter`: N workers each increment one counter K times with
  ``get_versioned``/``put_if_match``. The counter must end at exactly N×K.

What each race saw is judged by its report (:mod:`gradientmail.conformance._race_reports`,
re-exported here).
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from gradientmail._errors import (
    AtomicityViolationError,
    EndpointUnreachableError,
    GradientMailError,
    OutcomeUnknownError,
)
from gradientmail.conformance._race_reports import CounterReport, RaceReport, payload_for
from gradientmail.mailbox import Capability, Mailbox

__all__ = [
    "CounterReport",
    "Mode",
    "RaceReport",
    "cas_counter",
    "payload_for",
    "race_put_if_absent",
    "race_winners",
]

Mode = Literal["threads", "processes"]


# -- workers (module level so that processes can import them) ---------------------------------


def _race_worker(
    box_bytes: bytes, name: str, keys: list[str], size: int, each_key: bool, barrier: Any
) -> Any:
    box: Mailbox = pickle.loads(box_bytes)
    data = payload_for(name, size)
    outcomes: list[tuple[str, bool | None]] = []
    started = None
    for index, key in enumerate(keys):
        # With each_key, every key starts from the barrier: without it racers drift apart
        # after the first key, and later keys see little contention.
        if each_key or index == 0:
            barrier.wait()
        started = started or time.perf_counter()
        try:
            outcomes.append((key, box.put_if_absent(key, data)))
        except OutcomeUnknownError:
            # Allowed after a lost response; the bytes read back still judge the key.
            outcomes.append((key, None))
    return outcomes, time.perf_counter() - (started or time.perf_counter())


def _counter_worker(box_bytes: bytes, name: str, key: str, increments: int, barrier: Any) -> Any:
    box: Mailbox = pickle.loads(box_bytes)
    conflicts = 0
    barrier.wait()
    for _ in range(increments):
        while True:
            data, version = box.get_versioned(key)
            if box.put_if_match(key, str(int(data) + 1).encode(), version) is not None:
                break
            conflicts += 1
    return conflicts


def _run_in_process(target: Callable[..., Any], args: tuple[Any, ...], out: Any) -> None:
    name = args[1]
    try:
        out.put((name, True, target(*args)))
    except BaseException:  # noqa: BLE001 - every failure must reach the parent as text
        out.put((name, False, traceback.format_exc()))
        # A racer that fails before the start line must not leave the others waiting there.
        barrier = args[-1]
        if hasattr(barrier, "abort"):
            barrier.abort()


def _collect(out: Any, procs: list[Any], timeout: float) -> list[tuple[str, bool, Any]]:
    """Gather one result per process; stop early once every process has exited.

    A child that dies before reporting (killed, or failed to import) must not make the
    parent wait for the whole timeout, so the queue is read in short slices and the
    children's liveness checked between them.
    """
    items: list[tuple[str, bool, Any]] = []
    deadline = time.monotonic() + timeout
    while len(items) < len(procs) and time.monotonic() < deadline:
        try:
            items.append(out.get(timeout=0.2))
        except queue.Empty:
            if not any(proc.is_alive() for proc in procs):
                # Everything a child put before exiting is flushed by now; take the rest.
                while True:
                    try:
                        items.append(out.get(timeout=0.2))
                    except queue.Empty:
                        break
                break
    return items


def _run_all(
    target: Callable[..., Any],
    make_args: Callable[[str, Any], tuple[Any, ...]],
    names: list[str],
    mode: Mode,
    timeout: float,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run ``target`` once per name concurrently; return (results, errors) by name."""
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    if mode == "threads":
        barrier: Any = threading.Barrier(len(names))
        out: queue.Queue[tuple[str, bool, Any]] = queue.Queue()
        threads = [
            threading.Thread(
                target=_run_in_process, args=(target, make_args(n, barrier), out), daemon=True
            )
            for n in names
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
        items = [out.get_nowait() for _ in range(out.qsize())]
    elif mode == "processes":
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(len(names))
        pout = ctx.Queue()
        procs = [
            ctx.Process(target=_run_in_process, args=(target, make_args(n, barrier), pout))
            for n in names
        ]
        for proc in procs:
            proc.start()
        items = _collect(pout, procs, timeout)
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    else:
        raise ValueError(f"mode must be 'threads' or 'processes', not {mode!r}")
    for name, success, value in items:
        (results if success else errors)[name] = value
    for name in names:
        if name not in results and name not in errors:
            errors[name] = f"did not finish within {timeout:.0f} s"
    return results, errors


def race_put_if_absent(
    box: Mailbox,
    *,
    racers: int,
    keys: int,
    mode: Mode = "threads",
    payload_size: int = 16,
    prefix: str | None = None,
    timeout: float = 600.0,
    barrier_each_key: bool = True,
) -> RaceReport:
    """Race ``racers`` threads or processes for ``keys`` fresh keys under ``prefix``.

    Every racer calls ``put_if_absent`` on every key, in the same order, writing
    :func:`payload_for` its own name. Afterwards each key is read back.

    Args:
        barrier_each_key: all racers wait on a shared barrier before *every* key (the
            default), so every key is fully contended. ``False`` starts them together only
            once; they then drift apart, which is faster on stores that make contended
            losers wait (SeaweedFS), but contends later keys far less.
    """
    prefix = prefix or f"race-{uuid.uuid4().hex[:10]}"
    key_list = [f"{prefix}/k{i}" for i in range(keys)]
    names = [f"racer-{i}" for i in range(racers)]
    blob = pickle.dumps(box)
    started = time.perf_counter()
    results, errors = _run_all(
        _race_worker,
        lambda name, barrier: (blob, name, key_list, payload_size, barrier_each_key, barrier),
        names,
        mode,
        timeout,
    )
    report = RaceReport(key_list, names, errors=errors, payload_size=payload_size)
    report.elapsed = time.perf_counter() - started
    for name, (outcomes, seconds) in results.items():
        report.racing_seconds = max(report.racing_seconds, seconds)
        for key, won in outcomes:
            report.answered[key] = report.answered.get(key, 0) + 1
            if won is None:
                report.unknown.setdefault(key, []).append(name)
            elif won:
                report.winners.setdefault(key, []).append(name)
    for index, key in enumerate(key_list):
        try:
            report.stored[key] = box.get(key)
        except EndpointUnreachableError:
            # Nothing answers: reading the other keys back would only retry, key by key.
            report.stored.update(dict.fromkeys(key_list[index:]))
            break
        except GradientMailError:
            report.stored[key] = None
    return report


def cas_counter(
    box: Mailbox,
    *,
    workers: int,
    increments: int,
    mode: Mode = "threads",
    key: str | None = None,
    timeout: float = 600.0,
) -> CounterReport:
    """``workers`` threads or processes each increment one counter ``increments`` times."""
    key = key or f"counter-{uuid.uuid4().hex[:10]}"
    box.put(key, b"0")
    names = [f"worker-{i}" for i in range(workers)]
    blob = pickle.dumps(box)
    results, errors = _run_all(
        _counter_worker,
        lambda name, barrier: (blob, name, key, increments, barrier),
        names,
        mode,
        timeout,
    )
    try:
        final: int | None = int(box.get(key))
    except GradientMailError:
        final = None
    return CounterReport(workers, increments, final, errors, conflicts=sum(results.values()))


def race_winners(
    box: Mailbox, racers: int, keys: int, *, keep: bool = True
) -> dict[str, list[str]]:
    """Race ``racers`` for ``keys`` fresh keys in ``box``; return the keys each racer won.

    Args:
        keep: leave the raced keys in ``box``; ``False`` deletes them after the race,
            whether it passed or not.

    Raises:
        AtomicityViolationError: a key had two winners, none, or holds the wrong bytes.
    """
    shared = box.supports(Capability.SHARED_ACROSS_PROCESSES)
    prefix = f"race-{uuid.uuid4().hex[:10]}"
    try:
        report = race_put_if_absent(
            box, racers=racers, keys=keys, mode="processes" if shared else "threads", prefix=prefix
        )
    finally:
        if not keep:
            with ThreadPoolExecutor(8) as pool:
                deletes = [pool.submit(box.delete, f"{prefix}/k{i}") for i in range(keys)]
                try:
                    for done in deletes:
                        done.result()
                except BaseException:
                    # The store failed (a dead endpoint): stop, rather than retry every key.
                    pool.shutdown(cancel_futures=True)
                    raise
    if not report.ok:
        raise AtomicityViolationError(f"the race on {box.url} failed: {report.counterexample()}")
    wins: dict[str, list[str]] = {name: [] for name in report.racers}
    for key, (winner,) in report.winners.items():
        wins[winner].append(key)
    return wins
