"""Makespan of a shared queue against a fixed split and the fluid bound, in wall-clock time.

Learners are threads that "train" by sleeping (to deadlines, so sleep overshoot does not
accumulate). Each unit is 4 batches, and ``shared_queue`` runs with ``prefetch=1``, so a
learner claims its next unit when it starts its current unit's last batch.

1. The 24-unit example: per-unit times 1, 2, 2 and 4. A fixed split (6 units each) ends at
   t = 24; the fluid bound (work spread perfectly) is 24 / 2.25 = 10.67; the best whole-unit
   schedule ends at t = 12 (A does 11 units, B and C 5, D 3).
2. 800 units over the same four learners, where A slows down 3x halfway through (at half
   the no-slowdown fluid time), which no static split can anticipate.

For each, it prints makespan / fluid bound for the shared queue and for a fixed split,
both measured in the same run. Run: ``python benchmarks/makespan.py``
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from gradientmail import from_url
from gradientmail.patterns.shared_queue import shared_queue

COSTS = {"A": 1.0, "B": 2.0, "C": 2.0, "D": 4.0}
BATCHES = 4

#: learner, seconds since start -> seconds per unit
Pace = Callable[[str, float], float]


class Learner:
    """Sleeps to deadlines, so each unit takes exactly its cost from when it starts."""

    def __init__(self, name: str, pace: Pace, origin: float) -> None:
        self.name = name
        self.pace = pace
        self.origin = origin
        self.deadline = origin
        self.units = 0
        self.end = origin

    def train_batch(self) -> None:
        now = time.perf_counter()
        self.deadline = max(self.deadline, now)
        self.deadline += self.pace(self.name, self.deadline - self.origin) / BATCHES
        pause = self.deadline - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        self.end = self.deadline


def batches(unit: int) -> Iterator[int]:
    return iter([unit] * BATCHES)


def run_shared(size: int, pace: Pace, run: str) -> tuple[float, dict[str, int]]:
    box = from_url(f"memory://makespan-{run}")
    units = {f"u{i:04d}": i for i in range(size)}
    barrier = threading.Barrier(len(COSTS) + 1)
    learners: dict[str, Learner] = {}

    def work(name: str) -> None:
        barrier.wait()
        learner = learners[name]
        with shared_queue(units, mailbox=box, learner_id=name, load=batches, prefetch=1) as q:
            for n, _ in enumerate(q, 1):
                learner.train_batch()
                if n % BATCHES == 0:
                    learner.units += 1

    threads = [threading.Thread(target=work, args=(name,)) for name in COSTS]
    for thread in threads:
        thread.start()
    origin = time.perf_counter()
    learners.update({name: Learner(name, pace, origin) for name in COSTS})
    barrier.wait()
    for thread in threads:
        thread.join()
    makespan = max(learner.end for learner in learners.values()) - origin
    return makespan, {name: learner.units for name, learner in learners.items()}


def run_fixed(size: int, pace: Pace) -> float:
    share = size // len(COSTS)
    origin = time.perf_counter()
    learners = {name: Learner(name, pace, origin) for name in COSTS}

    def work(name: str) -> None:
        for _ in range(share * BATCHES):
            learners[name].train_batch()

    threads = [threading.Thread(target=work, args=(name,)) for name in COSTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(learner.end for learner in learners.values()) - origin


def fluid_bound(size: int, tick: float, switch: float | None) -> float:
    """Seconds to finish ``size`` units with work spread perfectly (A 3x slower after switch)."""
    rate = sum(1 / (c * tick) for c in COSTS.values())
    if switch is None or rate * switch >= size:
        return size / rate
    slowed = rate - 1 / (COSTS["A"] * tick) + 1 / (3 * COSTS["A"] * tick)
    return switch + (size - rate * switch) / slowed


def report(title: str, size: int, tick: float, pace: Pace, switch: float | None) -> None:
    fluid = fluid_bound(size, tick, switch)
    shared, counts = run_shared(size, pace, title.split()[0])
    fixed = run_fixed(size, pace)
    print(title)
    print(f"  fluid bound   {fluid / tick:8.2f} ticks")
    print(
        f"  shared queue  {shared / tick:8.2f} ticks  {shared / fluid:5.2f}x fluid   units "
        + " ".join(f"{n}={c}" for n, c in counts.items())
    )
    print(f"  fixed split   {fixed / tick:8.2f} ticks  {fixed / fluid:5.2f}x fluid")
    print(f"  fixed split / shared queue: {fixed / shared:.2f}x")


def main() -> None:
    tick = 0.1
    report(
        f"24 units, per-unit times 1,2,2,4 (1 tick = {tick * 1000:g} ms):",
        24,
        tick,
        lambda name, _t: COSTS[name] * tick,
        None,
    )
    tick = 0.01
    switch = fluid_bound(800, tick, None) / 2

    def slowing(name: str, t: float) -> float:
        slow = 3.0 if name == "A" and t >= switch else 1.0
        return COSTS[name] * tick * slow

    report(
        f"800 units, A slows 3x at t = {switch / tick:.1f} ticks (1 tick = {tick * 1000:g} ms):",
        800,
        tick,
        slowing,
        switch,
    )


if __name__ == "__main__":
    main()
