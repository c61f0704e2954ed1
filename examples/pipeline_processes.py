"""Case 2: generator processes feed one trainer through a mailbox pipeline on file://.

Fifteen producer processes each generate chunks of 2 samples (a float32 [32, 96, 96] input
and a uint8 [32, 1, 96, 96] target), taking 0.2-0.3 s per chunk. One trainer takes 128
batches at 0.2 s each. Items cross processes as bytes (numpy's .npy format, written here,
not in the library), each claimed exactly once with put_if_absent.

    python examples/pipeline_processes.py                     # full size, about 30 s
    python examples/pipeline_processes.py --producers 4 --batches 16 --train-time 0.02 \
        --gen-time 0.02 0.03                                  # scaled down, a few seconds
    python examples/pipeline_processes.py --url file:///mnt/shared/run7   # any mailbox URL

The trainer's wait per batch is the time from asking for a batch to holding its tensors;
the bytes are decoded into tensors in the consumer's prefetch thread (``decode=``), ahead
of the loop. The ideal run never waits: 128 × 0.2 s of training after
the first chunk's generation time.
"""

from __future__ import annotations

import argparse
import io
import math
import multiprocessing as mp
import random
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradientmail import from_url
from gradientmail.patterns.pipeline import Pipeline


@dataclass
class Config:
    """The run's shape; the defaults are the full case 2."""

    producers: int = 15
    batches: int = 128
    chunks_per_batch: int = 1
    samples_per_chunk: int = 2
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
        """Chunks producer ``index`` makes, so that all of them make exactly enough."""
        total = self.batches * self.chunks_per_batch
        return total // self.producers + (1 if index < total % self.producers else 0)

    def open(self) -> Pipeline[bytes]:
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


def decode(data: bytes) -> tuple[np.ndarray, np.ndarray, float]:
    buffer = io.BytesIO(data)
    gen_time = float(np.load(buffer)[0])
    return np.load(buffer), np.load(buffer), gen_time


def generator(config: Config, index: int, start: Any) -> None:
    """One producer process: register, wait at the start barrier, generate its chunks."""
    name = config.names[index]
    rng = np.random.default_rng(index)
    pace = random.Random(index)
    shape = (config.samples_per_chunk, 32)
    with config.open().producer(name) as out:
        start.wait()
        for _ in range(config.chunks_of(index)):
            began = time.perf_counter()
            inputs = rng.standard_normal((*shape, 96, 96), dtype=np.float32)
            targets = rng.integers(0, 2, size=(*shape, 1, 96, 96), dtype=np.uint8)
            # The rest of the chunk's 0.2-0.3 s is the model's work, simulated.
            time.sleep(max(0.0, pace.uniform(*config.gen_time) - (time.perf_counter() - began)))
            out.put(encode(inputs, targets, time.perf_counter() - began))


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


def trainer(config: Config, start: Any) -> Result:
    """The consumer: take batches, turn them into tensors, train for ``train_time`` each."""
    import torch

    # One intra-op thread: the step here is simulated, and on a busy machine a pool of
    # spinning OpenMP threads only adds jitter to the measured wait.
    torch.set_num_threads(1)
    result = Result(train_time=config.train_time)
    pipe = config.open()

    def to_tensors(data: bytes) -> tuple[Any, Any, float]:
        # Runs in the consumer's prefetch thread, so the loop below gets ready tensors.
        inputs, targets, gen_time = decode(data)
        return torch.from_numpy(inputs), torch.from_numpy(targets), gen_time

    with pipe.consumer("trainer", decode=to_tensors) as chunks:
        start.wait()  # every generator has registered: process start-up is not timed
        began = time.perf_counter()
        while True:
            asked = time.perf_counter()
            parts = []
            for inputs, targets, gen_time in chunks:
                if not result.batches and not parts:
                    result.first_gen_time = gen_time
                parts.append((inputs, targets))
                if len(parts) == config.chunks_per_batch:
                    break
            if not parts:
                break
            if len(parts) == 1:
                batch_inputs, batch_targets = parts[0]
            else:
                batch_inputs = torch.cat([p[0] for p in parts])
                batch_targets = torch.cat([p[1] for p in parts])
            result.waits.append(time.perf_counter() - asked)
            result.batches += 1
            result.samples += int(batch_inputs.shape[0])
            assert batch_targets.dtype == torch.uint8
            stepped = time.perf_counter()
            time.sleep(config.train_time)  # the training step, simulated
            result.steps.append(time.perf_counter() - stepped)
            if len(parts) < config.chunks_per_batch:
                break
        result.wall = time.perf_counter() - began
    return result


def run(config: Config) -> Result:
    """Start the generators, run the trainer here, and wait for every process."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(config.producers + 1, timeout=120)
    processes = [
        ctx.Process(target=generator, args=(config, i, start), name=name)
        for i, name in enumerate(config.names)
    ]
    for process in processes:
        process.start()
    try:
        return trainer(config, start)
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
    parser.add_argument("--chunks-per-batch", type=int, default=1)
    parser.add_argument("--train-time", type=float, default=0.2)
    parser.add_argument("--gen-time", type=float, nargs=2, default=(0.2, 0.3))
    parser.add_argument("--capacity", type=int, default=30)
    parser.add_argument("--prefetch", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gm-pipeline-") as tmp:
        config = Config(
            producers=args.producers,
            batches=args.batches,
            chunks_per_batch=args.chunks_per_batch,
            train_time=args.train_time,
            gen_time=tuple(args.gen_time),
            capacity=args.capacity,
            prefetch=args.prefetch,
            url=args.url or f"file://{tmp}/run-{uuid.uuid4().hex[:8]}",
        )
        print(f"{config.producers} generators → 1 trainer, {config.batches} batches, {config.url}")
        result = run(config)
    waits_ms = [w * 1000 for w in result.waits]
    print(f"batches {result.batches}, samples {result.samples}")
    steady = statistics.mean(result.steady_waits) * 1000
    print(
        f"trainer wait per batch after the first: mean {steady:.2f} ms, "
        f"p99 {result.p99() * 1000:.2f} ms; first batch {waits_ms[0]:.0f} ms"
    )
    print(
        f"wall = waits {sum(result.waits):.2f} s + steps {sum(result.steps):.2f} s "
        f"+ loop {result.wall - sum(result.waits) - sum(result.steps):.2f} s"
    )
    print(
        f"wall {result.wall:.2f} s, ideal {result.ideal:.2f} s, "
        f"ratio {result.wall / result.ideal:.3f}"
    )


if __name__ == "__main__":
    main()
