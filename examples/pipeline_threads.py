"""Case 1: a distillation pipeline on one host, five targets feeding three drafters.

Five "target" models produce hidden states at different rates, and three "drafter" trainers
consume them through one in-process pipeline: every drafter takes the next hidden state from
any target, so none sits idle while another has work waiting. Threads stand in for the GPUs
and CPU tensors for the GPU tensors; the pipeline passes each tensor by reference, never
copying or serializing it.

    python examples/pipeline_threads.py               # about 4 s
    python examples/pipeline_threads.py --seconds 0.3  # quicker

benchmarks/pipeline.py compares this with round robin (target i feeding drafter i % 3
through its own queue); its measuring harness is examples/pipeline_harness.py.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

from gradientmail.patterns.pipeline import Pipeline

#: seconds per hidden state for each target: two fast pairs and one slow target.
TARGET_TIMES = {
    "target-0": 0.008,
    "target-1": 0.008,
    "target-2": 0.030,
    "target-3": 0.010,
    "target-4": 0.010,
}
DRAFTER_TIME = 0.020
DRAFTERS = [f"drafter-{i}" for i in range(3)]
_NEVER = threading.Event()


def gpu_work(seconds: float) -> None:
    """Stands in for ``seconds`` of GPU work (a wait, so the other threads run meanwhile)."""
    _NEVER.wait(seconds)


def make_hidden_state(target: str, seq: int) -> Any:
    """A CPU tensor standing in for a GPU one (a plain tuple if torch is not installed)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is an optional extra
        return (target, seq)
    state = torch.full((16, 64), float(seq))
    state.origin = (target, seq)  # type: ignore[attr-defined]
    return state


def train_step(drafter: str, state: Any) -> None:
    """One drafter training step on ``state`` (simulated)."""
    gpu_work(DRAFTER_TIME)


def items_for(seconds: float) -> dict[str, int]:
    """Hidden states per target when each produces for ``seconds`` at its own rate."""
    return {name: max(1, round(seconds / t)) for name, t in TARGET_TIMES.items()}


def distill(
    items: dict[str, int],
    capacity: int = 24,
    step: Callable[[str, Any], None] = train_step,
) -> Pipeline[Any]:
    """Run every drafter and target in its own thread until every hidden state is trained on."""
    pipe = Pipeline.in_process(list(TARGET_TIMES), capacity=capacity, stall_timeout=60)

    def target(name: str) -> None:
        with pipe.producer(name) as out:  # leaving the block tells the drafters it is done
            for seq in range(items[name]):
                gpu_work(TARGET_TIMES[name])  # the target's forward pass
                out.put(make_hidden_state(name, seq))  # waits while `capacity` are queued

    def drafter(name: str) -> None:
        with pipe.consumer(name) as states:  # ends once every target is done and drained
            for state in states:
                step(name, state)

    threads = [threading.Thread(target=drafter, args=(name,)) for name in DRAFTERS]
    threads += [threading.Thread(target=target, args=(name,)) for name in TARGET_TIMES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return pipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="how long each target produces, at its rate"
    )
    parser.add_argument("--capacity", type=int, default=24, help="items in flight")
    args = parser.parse_args()
    items = items_for(args.seconds)
    began = time.perf_counter()
    stats = distill(items, args.capacity).stats()
    wall = time.perf_counter() - began
    assert stats.produced == stats.consumed == sum(items.values())
    print(f"{stats.consumed} hidden states trained on in {wall:.2f} s")
    for name, drafter in stats.consumers.items():
        idle = drafter.idle_while_available_s or 0.0
        print(
            f"  {name}: {drafter.items:4d} items, waited {drafter.wait_s:.2f} s, "
            f"idle while items waited {idle * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
