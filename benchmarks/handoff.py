"""How much does ``shared_queue``'s handoff cost the consumer, next to a bare ``queue.Queue``?

Two measurements on ``memory://``, each against a baseline run in the same process:

1. **Wait in next()**: a loader much faster than the consumer (the consumer "trains" for
   0.5 ms per item), so the buffer is full and ``next()`` should only pay the handoff. We
   time every ``next()`` and print the median and p99 next to the same figures for
   ``queue.Queue.get()`` fed by a thread. Goal: at most 2x the bare queue.
2. **Throughput**: a no-op loader and a consumer that does nothing, items per second through
   ``shared_queue`` (default prefetch 8) and through a bare ``queue.Queue(maxsize=8)``.
   Goal: at least 100k items/s.

Run: ``python benchmarks/handoff.py``
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator

from gradientmail import from_url
from gradientmail.patterns.shared_queue import shared_queue

WORK_S = 0.0005
WAIT_ITEMS = 3000
THROUGHPUT_ITEMS = 300_000
UNITS = 30
ROUNDS = 5


def spin(seconds: float) -> None:
    """Busy work standing in for a training step (keeps the GIL like real Python work)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def timed_next(iterator: Iterator[int], count: int, work: Callable[[], None]) -> list[float]:
    waits = []
    for _ in range(count):
        start = time.perf_counter()
        next(iterator)
        waits.append(time.perf_counter() - start)
        work()
    return waits


def bare_queue_items(total: int, maxsize: int) -> Iterator[int]:
    handoff: queue.Queue[int | None] = queue.Queue(maxsize=maxsize)

    def produce() -> None:
        for i in range(total):
            handoff.put(i)
        handoff.put(None)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    while True:
        item = handoff.get()
        if item is None:
            break
        yield item
    thread.join()


def per_unit(total: int) -> dict[str, range]:
    size = total // UNITS
    return {f"u{i:03d}": range(i * size, (i + 1) * size) for i in range(UNITS)}


def queue_waits(run: int) -> list[float]:
    units = per_unit(WAIT_ITEMS)
    box = from_url(f"memory://handoff-wait-{run}")
    with shared_queue(units, mailbox=box, learner_id="l", load=iter) as items:
        spin(0.05)  # let the loader fill the buffer first, as in steady state
        return timed_next(items, WAIT_ITEMS, lambda: spin(WORK_S))


def bare_waits() -> list[float]:
    items = bare_queue_items(WAIT_ITEMS, 8)
    spin(0.05)
    return timed_next(items, WAIT_ITEMS, lambda: spin(WORK_S))


def throughput_queue(run: int) -> float:
    units = per_unit(THROUGHPUT_ITEMS)
    box = from_url(f"memory://handoff-rate-{run}")
    start = time.perf_counter()
    count = 0
    with shared_queue(units, mailbox=box, learner_id="l", load=iter) as items:
        for _ in items:
            count += 1
    assert count == THROUGHPUT_ITEMS // UNITS * UNITS
    return count / (time.perf_counter() - start)


def throughput_bare() -> float:
    start = time.perf_counter()
    count = sum(1 for _ in bare_queue_items(THROUGHPUT_ITEMS, 8))
    return count / (time.perf_counter() - start)


def main() -> None:
    # Alternate the two, ROUNDS rounds each, and keep each figure's best round (the least
    # noise from other processes on a shared machine).
    q_waits, b_waits, q_rates, b_rates = [], [], [], []
    for run in range(ROUNDS):
        b_waits.append(bare_waits())
        q_waits.append(queue_waits(run))
        b_rates.append(throughput_bare())
        q_rates.append(throughput_queue(run))
    q50 = min(percentile(w, 50) for w in q_waits) * 1e6
    q99 = min(percentile(w, 99) for w in q_waits) * 1e6
    b50 = min(percentile(w, 50) for w in b_waits) * 1e6
    b99 = min(percentile(w, 99) for w in b_waits) * 1e6
    print(f"wait in next(), loader faster than consumer ({WAIT_ITEMS} items, best of {ROUNDS}):")
    print(f"  queue.Queue.get()   median {b50:7.2f} us   p99 {b99:7.2f} us")
    print(f"  shared_queue next() median {q50:7.2f} us   p99 {q99:7.2f} us")
    print(
        f"  ratio (shared_queue / bare): median {q50 / b50:.2f}x, "
        f"p99 {q99 / b99:.2f}x  (goal <= 2x)"
    )
    q_rate, b_rate = max(q_rates), max(b_rates)
    print(f"throughput, no-op loader, prefetch 8 ({THROUGHPUT_ITEMS} items, best of {ROUNDS}):")
    print(f"  queue.Queue(maxsize=8) {b_rate:10,.0f} items/s")
    print(f"  shared_queue           {q_rate:10,.0f} items/s  (goal >= 100,000)")
    print(f"  ratio (shared_queue / bare): {q_rate / b_rate:.2f}x")


if __name__ == "__main__":
    main()
