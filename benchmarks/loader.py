"""What ``SharedQueueLoader`` costs a training loop, next to torch's DataLoader alone.

Both loaders run in the same process, one after the other, ``--rounds`` times each
(alternating), over the same items: ``--units`` units of ``--items`` small tensors, in
batches of ``--batch``, with ``--workers`` worker processes, and a loop that does nothing
with a batch but take it. The baseline is a bare ``IterableDataset`` that splits the same
items among the workers (no store, no claims); gradientmail's run is a
``SharedQueueDataset`` on a fresh ``file://`` store in a temporary directory each round,
so it pays for its claims, leases and completions, and for telling the workers which
batches the loop took.

It prints, per loader, the median of the rounds for:

* **epoch**: from ``iter(loader)`` to its ``StopIteration`` (workers started afresh);
* **batches/s** over the epoch;
* **end**: from the last batch to ``StopIteration``, which for ``SharedQueueLoader`` holds
  the wait for every worker to record its last units,

and the ratios gradientmail / baseline of the epoch time and the throughput.

Run: ``python benchmarks/loader.py [--units 200] [--items 64] [--batch 32] [--workers 2]``
(about a minute).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from gradientmail import from_url
from gradientmail.status import read_status
from gradientmail.torch import SharedQueueDataset, SharedQueueLoader


def load(unit: int, items: int) -> Iterator[torch.Tensor]:
    for k in range(items):
        yield torch.tensor([unit, k], dtype=torch.int64)


class Bare(IterableDataset[torch.Tensor]):
    """The same items, split among the workers by unit, with nothing else."""

    def __init__(self, units: int, items: int) -> None:
        self.units = units
        self.items = items

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = get_worker_info()
        workers, me = (1, 0) if info is None else (info.num_workers, info.id)
        for unit in range(me, self.units, workers):
            yield from load(unit, self.items)


def one_epoch(loader: Any) -> tuple[float, float, int]:
    """(epoch seconds, seconds from the last batch to StopIteration, batches)."""
    began = time.perf_counter()
    batches = 0
    last = began
    for _ in loader:
        batches += 1
        last = time.perf_counter()
    ended = time.perf_counter()
    return ended - began, ended - last, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=200)
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    items = functools.partial(load, items=args.items)
    options = {"batch_size": args.batch, "num_workers": args.workers}
    figures: dict[str, list[tuple[float, float, int]]] = {"torch": [], "gradientmail": []}
    for _ in range(args.rounds):
        figures["torch"].append(one_epoch(DataLoader(Bare(args.units, args.items), **options)))
        with tempfile.TemporaryDirectory() as root:
            box = from_url(f"file://{root}/run")
            units = {f"u{i:05d}": i for i in range(args.units)}
            dataset = SharedQueueDataset(units, mailbox=box, load=items, learner_id="bench")
            figures["gradientmail"].append(one_epoch(SharedQueueLoader(dataset, **options)))
            assert read_status(box).complete, "the epoch did not complete"
    total = args.units * args.items
    print(
        f"{args.units} units x {args.items} items, batches of {args.batch}, "
        f"{args.workers} workers, {args.rounds} rounds (medians)"
    )
    medians = {}
    for name, rounds in figures.items():
        epoch = statistics.median(r[0] for r in rounds)
        end = statistics.median(r[1] for r in rounds)
        batches = rounds[0][2]
        medians[name] = epoch
        print(
            f"  {name:12s} epoch {epoch:6.2f}s  {batches / epoch:8.0f} batches/s  "
            f"{total / epoch:9.0f} items/s  end {end * 1000:6.1f} ms"
        )
    ratio = medians["gradientmail"] / medians["torch"]
    print(f"  gradientmail / torch: epoch time x{ratio:.2f}, throughput x{1 / ratio:.2f}")


if __name__ == "__main__":
    main()
