"""Case 1: a distillation pipeline on one host, five targets feeding three drafters.

Five "target" models produce hidden states at different rates, and three "drafter"
trainers consume them. Here threads stand in for the GPUs and CPU tensors for the GPU
tensors; the pipeline passes each tensor by reference, never copying or serializing it.

The same run is done twice:

* round robin: target i sends to drafter i % 3 through its own queue (the design that
  starved a drafter: its queue sat empty while the others' were full);
* one shared pipeline: every drafter takes the next item from any target.

    python examples/pipeline_threads.py               # about 8 s
    python examples/pipeline_threads.py --seconds 0.3  # quicker

It prints each drafter's item count, busy share and mean queue depth for both designs.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradientmail.patterns.pipeline import Pipeline

#: seconds per hidden state for each target: two fast pairs and one slow target, so that
#: round robin gives drafters 0 and 1 two fast targets each and drafter 2 only the slow one.
TARGET_TIMES = {
    "target-0": 0.008,
    "target-1": 0.008,
    "target-2": 0.030,
    "target-3": 0.010,
    "target-4": 0.010,
}
DRAFTER_TIME = 0.020
DRAFTERS = 3


def make_hidden_state(target: str, seq: int) -> Any:
    """A CPU tensor standing in for a GPU one (a plain tuple if torch is not installed)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an optional extra
        return (target, seq)
    state = torch.full((16, 64), float(seq))
    state.origin = (target, seq)  # type: ignore[attr-defined]
    return state


def origin(item: Any) -> tuple[str, int]:
    return getattr(item, "origin", item)  # type: ignore[no-any-return]


@dataclass
class DrafterReport:
    items: int = 0
    busy: float = 0.0
    depths: list[int] = field(default_factory=list)
    idle_while_available: float | None = None
    wake_p99: float | None = None


@dataclass
class Report:
    """One design's run."""

    design: str
    wall: float = 0.0
    drafters: dict[str, DrafterReport] = field(default_factory=dict)
    delivered: list[tuple[str, int]] = field(default_factory=list)

    @property
    def utilisation(self) -> float:
        """Busy time of all drafters over drafters × wall time."""
        return sum(d.busy for d in self.drafters.values()) / (len(self.drafters) * self.wall)


def _run_threads(targets: list[Callable[[], None]]) -> float:
    threads = [threading.Thread(target=t) for t in targets]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def items_for(seconds: float, target_times: dict[str, float] = TARGET_TIMES) -> dict[str, int]:
    """Hidden states per target when each produces for ``seconds`` at its own rate."""
    return {name: max(1, round(seconds / t)) for name, t in target_times.items()}


def run_shared(
    items: dict[str, int],
    capacity: int = 8,
    drafter_time: float = DRAFTER_TIME,
    target_times: dict[str, float] = TARGET_TIMES,
) -> Report:
    """Every target feeds one shared in-process pipeline; every drafter takes from it."""
    report = Report("shared pipeline")
    pipe = Pipeline.in_process(list(target_times), capacity=capacity, stall_timeout=60)
    lock = threading.Lock()
    pause = threading.Event()  # never set: wait(t) stands in for t seconds of GPU work

    def target(name: str) -> Callable[[], None]:
        def run() -> None:
            with pipe.producer(name) as out:
                for seq in range(items[name]):
                    pause.wait(target_times[name])
                    out.put(make_hidden_state(name, seq))

        return run

    def drafter(name: str) -> Callable[[], None]:
        mine = report.drafters[name] = DrafterReport()

        def run() -> None:
            with pipe.consumer(name) as states:
                for state in states:
                    began = time.perf_counter()
                    pause.wait(drafter_time)  # the training step
                    mine.busy += time.perf_counter() - began
                    mine.items += 1
                    with lock:
                        report.delivered.append(origin(state))

        return run

    drafters = [f"drafter-{i}" for i in range(DRAFTERS)]
    runners = [drafter(d) for d in drafters] + [target(t) for t in target_times]
    report.wall = _run_threads(runners)
    for name, stats in pipe.stats().consumers.items():
        report.drafters[name].idle_while_available = stats.idle_while_available_s
        report.drafters[name].wake_p99 = stats.wake_latency.percentile(99)
    return report


def run_round_robin(
    items: dict[str, int],
    capacity: int = 8,
    drafter_time: float = DRAFTER_TIME,
    target_times: dict[str, float] = TARGET_TIMES,
) -> Report:
    """Target i sends to drafter i % 3 through that drafter's own bounded queue."""
    report = Report("round robin")
    per_queue = max(1, capacity // DRAFTERS)
    queues: list[queue.Queue[Any]] = [queue.Queue(per_queue) for _ in range(DRAFTERS)]
    feeders = [0] * DRAFTERS
    for i in range(len(target_times)):
        feeders[i % DRAFTERS] += 1
    lock = threading.Lock()
    pause = threading.Event()
    done = object()

    def target(index: int, name: str) -> Callable[[], None]:
        mine = queues[index % DRAFTERS]

        def run() -> None:
            for seq in range(items[name]):
                pause.wait(target_times[name])
                mine.put(make_hidden_state(name, seq))
            mine.put(done)  # point to point: the drafter knows how many feed it

        return run

    def drafter(index: int) -> Callable[[], None]:
        mine = report.drafters[f"drafter-{index}"] = DrafterReport()
        inbox = queues[index]

        def run() -> None:
            finished = 0
            while finished < feeders[index]:
                state = inbox.get()
                with lock:
                    mine.depths.append(inbox.qsize())
                    # sample every queue's depth as this drafter takes an item
                if state is done:
                    finished += 1
                    continue
                began = time.perf_counter()
                pause.wait(drafter_time)
                mine.busy += time.perf_counter() - began
                mine.items += 1
                with lock:
                    report.delivered.append(origin(state))

        return run

    runners = [drafter(i) for i in range(DRAFTERS)]
    runners += [target(i, name) for i, name in enumerate(target_times)]
    report.wall = _run_threads(runners)
    return report


def describe(report: Report) -> str:
    lines = [f"{report.design}: wall {report.wall:.2f} s, utilisation {report.utilisation:.0%}"]
    for name, d in report.drafters.items():
        extra = ""
        if d.depths:
            extra = f", mean queue depth {sum(d.depths) / len(d.depths):.1f}"
        if d.idle_while_available is not None:
            extra += f", idle while items waited {d.idle_while_available * 1000:.1f} ms"
        if d.wake_p99 is not None:
            extra += f", wake-up p99 {d.wake_p99 * 1000:.2f} ms"
        lines.append(f"  {name}: {d.items:4d} items, busy {d.busy / report.wall:.0%}{extra}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="how long each target produces, at its rate"
    )
    parser.add_argument("--capacity", type=int, default=24, help="items in flight")
    args = parser.parse_args()
    items = items_for(args.seconds)
    total = sum(items.values())
    for run in (run_round_robin, run_shared):
        report = run(items, args.capacity)
        assert sorted(report.delivered) == sorted(
            (t, s) for t, n in items.items() for s in range(n)
        ), "every hidden state exactly once"
        print(describe(report))
    print(f"({total} hidden states; a drafter step takes {DRAFTER_TIME * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
