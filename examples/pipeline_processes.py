"""Case 2: generator processes feed one trainer through a mailbox pipeline on file://.

Fifteen producer processes each generate chunks of 2 samples (a float32 [32, 96, 96] input
and a uint8 [32, 1, 96, 96] target), taking 0.2-0.3 s per chunk. One trainer takes 128
batches at 0.2 s each. Items cross processes as bytes (numpy's .npy format, written here,
not in the library), each claimed exactly once with put_if_absent; the trainer's prefetch
thread turns them into tensors (``decode=``) ahead of its loop.

    python examples/pipeline_processes.py                     # full size, about 30 s
    python examples/pipeline_processes.py --producers 4 --batches 16 --train-time 0.02 \
        --gen-time 0.02 0.03                                  # scaled down, a few seconds
    python examples/pipeline_processes.py --url file:///mnt/shared/run7   # any mailbox URL

benchmarks/pipeline.py times the trainer's wait per batch; its measuring harness is
examples/pipeline_harness.py.
"""

from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from gradientmail import from_url
from gradientmail.patterns.pipeline import Consumer, Pipeline

R = TypeVar("R")
SAMPLES_PER_CHUNK = 2


@dataclass
class Config:
    """The run's shape; the defaults are the full case 2."""

    producers: int = 15
    batches: int = 128
    train_time: float = 0.2
    gen_time: tuple[float, float] = (0.2, 0.3)
    capacity: int = 30
    #: Chunks the trainer's prefetch thread claims and decodes ahead: 4 steps of 0.2 s
    #: absorb a store hiccup (an fsync stalled by a busy disk) of over half a second.
    prefetch: int = 4
    url: str = ""

    @property
    def names(self) -> list[str]:
        return [f"gen-{i:02d}" for i in range(self.producers)]

    def chunks_of(self, index: int) -> int:
        """Chunks producer ``index`` makes, so that all of them make exactly ``batches``."""
        return self.batches // self.producers + (1 if index < self.batches % self.producers else 0)

    def open(self) -> Pipeline[bytes]:
        """This process's handle on the run (every process opens its own, alike)."""
        return Pipeline.over_mailbox(
            from_url(self.url),
            self.names,
            capacity=self.capacity,
            prefetch=self.prefetch,
            stall_timeout=120,
        )


def encode(inputs: np.ndarray, targets: np.ndarray, gen_time: float) -> bytes:
    """One chunk as bytes: its generation time, then the two arrays in .npy format."""
    buffer = io.BytesIO()
    np.save(buffer, np.array([gen_time]))
    np.save(buffer, inputs)
    np.save(buffer, targets)
    return buffer.getvalue()


def to_tensors(data: bytes) -> tuple[Any, Any, float]:
    """A chunk's bytes as (inputs, targets, generation time); runs in the prefetch thread."""
    import torch

    buffer = io.BytesIO(data)
    gen_time = float(np.load(buffer)[0])
    return torch.from_numpy(np.load(buffer)), torch.from_numpy(np.load(buffer)), gen_time


def generator(config: Config, index: int, start: Any) -> None:
    """One producer process: register, wait until the trainer is ready, generate chunks."""
    rng = np.random.default_rng(index)
    pace = random.Random(index)
    shape = (SAMPLES_PER_CHUNK, 32)
    with config.open().producer(config.names[index]) as out:
        start.wait()
        for _ in range(config.chunks_of(index)):
            began = time.perf_counter()
            inputs = rng.standard_normal((*shape, 96, 96), dtype=np.float32)
            targets = rng.integers(0, 2, size=(*shape, 1, 96, 96), dtype=np.uint8)
            # The rest of the chunk's 0.2-0.3 s is the model's work, simulated.
            time.sleep(max(0.0, pace.uniform(*config.gen_time) - (time.perf_counter() - began)))
            out.put(encode(inputs, targets, time.perf_counter() - began))


def run(config: Config, train: Callable[[Consumer[Any]], R]) -> R:
    """Start the generators, ``train`` on the chunks here, and wait for every process."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(config.producers + 1, timeout=120)
    processes = [
        ctx.Process(target=generator, args=(config, i, start), name=name)
        for i, name in enumerate(config.names)
    ]
    for process in processes:
        process.start()
    try:
        with config.open().consumer("trainer", decode=to_tensors) as chunks:
            start.wait()  # every generator has registered
            return train(chunks)
    finally:
        start.abort()  # releases generators still waiting if the trainer failed early
        for process in processes:
            process.join(60)
            if process.is_alive():
                process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="mailbox URL (default: a new temporary file:// dir)")
    parser.add_argument("--producers", type=int, default=15)
    parser.add_argument("--batches", type=int, default=128)
    parser.add_argument("--train-time", type=float, default=0.2)
    parser.add_argument("--gen-time", type=float, nargs=2, default=(0.2, 0.3))
    args = parser.parse_args()

    def train(chunks: Consumer[Any]) -> float:
        began = time.perf_counter()
        for inputs, targets, _gen_time in chunks:
            assert inputs.shape[0] == targets.shape[0] == SAMPLES_PER_CHUNK
            time.sleep(args.train_time)  # the training step, simulated
        return time.perf_counter() - began

    with tempfile.TemporaryDirectory(prefix="gm-pipeline-") as tmp:
        url = args.url or f"file://{tmp}/run-{uuid.uuid4().hex[:8]}"
        config = Config(
            producers=args.producers,
            batches=args.batches,
            train_time=args.train_time,
            gen_time=tuple(args.gen_time),
            url=url,
        )
        print(f"{config.producers} generators → 1 trainer, {config.batches} batches, {url}")
        wall = run(config, train)
    ideal = config.batches * config.train_time
    print(f"trained in {wall:.2f} s; training alone takes {ideal:.2f} s")


if __name__ == "__main__":
    main()
