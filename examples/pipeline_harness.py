"""The measuring harness around the two pipeline examples, for benchmarks/pipeline.py.

Not an example to copy: it runs ``pipeline_threads.distill`` and ``pipeline_processes.run``
with training steps that record what they saw, and the round-robin design case 1 is
compared with.

* Case 1: :func:`run_shared` (the example, measured) and :func:`run_round_robin` (target i
  feeds drafter i % 3 through its own queue: the design that starved a drafter) return a
  :class:`Report` of each drafter's items and busy time.
* Case 2: :func:`measure` returns the trainer's wait per batch, its steps and the wall time,
  as a :class:`Result`.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pipeline_processes as case2
import pipeline_threads as case1

from gradientmail.patterns.pipeline import Consumer

# -- case 1 ---------------------------------------------------------------------------------


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


def origin(state: Any) -> tuple[str, int]:
    return getattr(state, "origin", state)  # type: ignore[no-any-return]


def run_shared(items: dict[str, int], capacity: int) -> Report:
    """``pipeline_threads.distill``, with each drafter's busy time and items recorded."""
    report = Report("shared pipeline")
    report.drafters = {name: DrafterReport() for name in case1.DRAFTERS}
    lock = threading.Lock()

    def step(name: str, state: Any) -> None:
        mine = report.drafters[name]
        began = time.perf_counter()
        case1.train_step(name, state)
        mine.busy += time.perf_counter() - began
        mine.items += 1
        with lock:
            report.delivered.append(origin(state))

    began = time.perf_counter()
    pipe = case1.distill(items, capacity, step)
    report.wall = time.perf_counter() - began
    expected = sorted((target, seq) for target, n in items.items() for seq in range(n))
    assert sorted(report.delivered) == expected, "every hidden state exactly once"
    for name, stats in pipe.stats().consumers.items():
        report.drafters[name].idle_while_available = stats.idle_while_available_s
        report.drafters[name].wake_p99 = stats.wake_latency.percentile(99)
    return report


def run_round_robin(items: dict[str, int], capacity: int) -> Report:
    """Target i sends to drafter i % 3 through that drafter's own bounded queue."""
    report = Report("round robin")
    drafters = len(case1.DRAFTERS)
    queues: list[queue.Queue[Any]] = [
        queue.Queue(max(1, capacity // drafters)) for _ in range(drafters)
    ]
    feeders = [0] * drafters
    for i in range(len(case1.TARGET_TIMES)):
        feeders[i % drafters] += 1
    lock = threading.Lock()
    done = object()

    def target(index: int, name: str) -> Callable[[], None]:
        mine = queues[index % drafters]

        def run() -> None:
            for seq in range(items[name]):
                case1.gpu_work(case1.TARGET_TIMES[name])
                mine.put(case1.make_hidden_state(name, seq))
            mine.put(done)  # point to point: the drafter knows how many feed it

        return run

    def drafter(index: int) -> Callable[[], None]:
        mine = report.drafters[case1.DRAFTERS[index]] = DrafterReport()
        inbox = queues[index]

        def run() -> None:
            finished = 0
            while finished < feeders[index]:
                state = inbox.get()
                with lock:
                    mine.depths.append(inbox.qsize())
                if state is done:
                    finished += 1
                    continue
                began = time.perf_counter()
                case1.train_step(case1.DRAFTERS[index], state)
                mine.busy += time.perf_counter() - began
                mine.items += 1
                with lock:
                    report.delivered.append(origin(state))

        return run

    runners = [drafter(i) for i in range(drafters)]
    runners += [target(i, name) for i, name in enumerate(case1.TARGET_TIMES)]
    threads = [threading.Thread(target=t) for t in runners]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    report.wall = time.perf_counter() - began
    return report


# -- case 2 ---------------------------------------------------------------------------------


@dataclass
class Result:
    """What the trainer measured."""

    train_time: float
    #: per batch, seconds from asking for it to holding its tensors
    waits: list[float] = field(default_factory=list)
    #: per batch, seconds the (simulated) training step actually took
    steps: list[float] = field(default_factory=list)
    #: from the start signal (every generator registered) to the end of the last step
    wall: float = 0.0
    #: the generation time of the first chunk the trainer received
    first_gen_time: float = 0.0
    batches: int = 0
    samples: int = 0
    #: seconds spent recording deliveries, in the background during the steps
    deliver_s: float = 0.0
    #: the part of it the trainer's next() waited for (included in ``waits``)
    delivery_wait_s: float = 0.0

    @property
    def ideal(self) -> float:
        """The wall time with zero wait: the first chunk's generation, then only training."""
        return self.first_gen_time + self.batches * self.train_time

    @property
    def steady_waits(self) -> list[float]:
        """Waits after the first batch (the first one waits for generation by definition)."""
        return self.waits[1:] or self.waits

    def p99(self) -> float:
        ordered = sorted(self.steady_waits)
        return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def measure(config: case2.Config) -> Result:
    """Run case 2, timing every wait for a batch and every training step."""
    import torch

    # One intra-op thread: the step here is simulated, and on a busy machine a pool of
    # spinning OpenMP threads only adds jitter to the measured wait.
    torch.set_num_threads(1)
    result = Result(train_time=config.train_time)

    def train(chunks: Consumer[Any]) -> Result:
        began = asked = time.perf_counter()
        for inputs, targets, gen_time in chunks:
            result.waits.append(time.perf_counter() - asked)
            if not result.batches:
                result.first_gen_time = gen_time
            result.batches += 1
            result.samples += int(inputs.shape[0])
            assert targets.dtype == torch.uint8
            stepped = time.perf_counter()
            time.sleep(config.train_time)  # the training step, simulated
            result.steps.append(time.perf_counter() - stepped)
            asked = time.perf_counter()
        result.wall = time.perf_counter() - began
        result.deliver_s = chunks.stats.deliver_s
        result.delivery_wait_s = chunks.stats.delivery_wait_s
        return result

    return case2.run(config, train)
