"""Four learners of unequal speed train one model, sharing one dataset through the mailbox.

The README's demo. It writes a small synthetic token dataset (48 shards), then starts four
learner processes, slowed down 1x, 2x, 2x and 4x, that share the shards through a mailbox
(``file://`` in a temporary directory unless you pass ``--url``). Nobody knows anyone's
speed: the fast learner simply claims more shards, and all four finish together.

**All four train one shared model** (a tiny language model on CPU, with a learning-rate
schedule driven by the global step stored with each batch) with the recipe for unequal
GPUs: each takes ``exchange.batch_size`` sequences a step, which follows its measured speed
(16 for the fastest, 8 for one half as fast, 4 for one a quarter as fast), so every learner
steps as often as the fastest one; its optimizer's steps are exchanged with the shared
parameters through the mailbox (``gradientmail.torch.Exchange``), never waiting for the
others, each delta weighted by the sequences it covers. The main process samples the
shared model's held-out loss as it goes. Then, in the same run and on the same sequences,
it trains the same model two other ways and prints each one's loss at the same wall time:
the fastest learner alone, and lockstep data parallel with batches in proportion to speed
(16 + 8 + 8 + 4 sequences a step, every rank busy for the same time: the best a
synchronous job can do, which needs a profiler or a coordinator). Each method runs at its
own best lr (``LR_FACTORS``; ``--lr-factors shared=1`` runs the shared model at the plain
square-root rule). ``--independent`` trains four separate models instead. For DDP itself,
see ``train_ddp.py``; for a preprocessing job, ``preprocess.py``; for a measured
comparison with each method's lr tuned, ``benchmarks/unequal_gpus.py``.

    python examples/train_shared_queue.py            # about 30 s; no network, no GPU
    gradientmail status URL --plot run.png            # the command it prints at the end

Each learner's loop is the one a real run uses::

    with session, Exchange(model, mailbox=box, learner_id=name, optimizer=optimizer,
                           batch_size=16) as exchange, \
            shared_queue(shards, mailbox=box, learner_id=name, load=load_unit,
                         order=my_lane_first) as batches:
        sequences = ((step, seq) for step, tokens in batches for seq in tokens)
        while chunk := list(itertools.islice(sequences, exchange.batch_size)):
            # the lr of a step on the group's batch (AdamW's square-root rule), tuned
            set_lr(optimizer, 2 * schedule(chunk[0][0]) * (exchange.group_batch / 16) ** 0.5)
            ...train on torch.stack([seq for _, seq in chunk])...
            optimizer.step()  # counted by the exchange
            session.step(samples=len(chunk))
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import math
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import demo_compare as harness  # the measuring around the demo, not part of the loop
import torch
from torch import nn

import gradientmail
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session
from gradientmail.torch import Exchange

VOCAB = 64
SEQ = 32
BATCH = 16
#: The share of tokens drawn at random instead of following their sequence's stride.
NOISE = 0.25
#: Each method's lr as a multiple of its square-root rule (the schedule's lr times
#: sqrt(batch / 16)), the best of a sweep on a quiet 2-core machine: the shared model's
#: over 1x to 3x, three runs each (2x to 3x did as well as each other), its peers' over
#: 0.7x to 2x (docs/exchange.md has the figures). The shared model's best lies above
#: lockstep's: its deltas come from batches smaller than the group's, and on noisy data a
#: step on few sequences carries less than its share of a step on all of them.
LR_FACTORS = {"shared": 2.0, "lockstep": 1.5, "alone": 1.0}


# -- the dataset ------------------------------------------------------------------------------


def write_dataset(root: Path, shards: int, batches: int, seed: int = 0) -> dict[str, Any]:
    """Write ``shards`` files of token batches; return identifier → (shard index, path).

    Each sequence counts up by a per-sequence stride modulo ``VOCAB``, so the next token is
    predictable from the previous two and the loss visibly falls.
    """
    root.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    lanes = 4
    units: dict[str, Any] = {}
    for index in range(shards):
        start = torch.randint(0, VOCAB, (batches, BATCH, 1), generator=generator)
        stride = torch.randint(1, 8, (batches, BATCH, 1), generator=generator)
        tokens = (start + stride * torch.arange(SEQ + 1)) % VOCAB
        # A quarter of the tokens are noise: a gradient from a few sequences is then a noisy
        # estimate, so a step on more sequences is a better one (larger learners' batches
        # help, as on real data; a task with no noise is learnt as fast by one learner).
        noise = torch.rand(tokens.shape, generator=generator) < NOISE
        tokens[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=generator)
        path = root / f"shard-{index:03d}.pt"
        torch.save(tokens, path)
        units[f"lane{index % lanes}-{index // lanes:03d}"] = (index, str(path))
    return units


def load_unit(unit: tuple[int, str]) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(global step, token batch)`` for each batch of one shard."""
    index, path = unit
    tokens = torch.load(path, weights_only=True)
    for j in range(tokens.shape[0]):
        yield index * tokens.shape[0] + j, tokens[j]


# -- the model and schedule -------------------------------------------------------------------


class TinyLM(nn.Module):
    """Predicts the next token from the previous two."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, VOCAB))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pairs = torch.cat([self.embed(tokens[:, :-1]), self.embed(tokens[:, 1:])], dim=-1)
        return self.mlp(pairs)  # type: ignore[no-any-return]


def token_loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The mean loss of predicting each token from the two before it."""
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 2:].reshape(-1))


def schedule(step: int, total: int, base: float = 1e-2, warmup: int = 20) -> float:
    """Linear warm-up, then cosine decay, by global step."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


# -- one learner ------------------------------------------------------------------------------


def learner(
    name: str,
    slowdown: float,
    url: str,
    units: dict[str, Any],
    order: list[str],
    total_steps: int,
    base_seconds: float,
    shared: bool,
    lr_factor: float,
    start: Any,
    results: Any,
) -> None:
    """Train on the shards this learner claims; report units, samples and busy time."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    box = gradientmail.from_url(url)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    busy = 0.0
    loss = float("nan")
    start.wait()  # every process has imported torch and built its model
    session = Session(box, name, publish_every=1.0)
    # The shared model: an Exchange that never waits, counting the optimizer's steps and
    # sizing this learner's batch from its speed. Without it, an independent model.
    exchange = (
        Exchange(model, mailbox=box, learner_id=name, optimizer=optimizer, batch_size=BATCH)
        if shared
        else None
    )
    with (
        session,
        exchange or contextlib.nullcontext(),
        shared_queue(units, mailbox=box, learner_id=name, load=load_unit, order=order) as batches,
    ):
        sequences = ((step, seq) for step, tokens in batches for seq in tokens)
        while chunk := list(
            itertools.islice(sequences, exchange.batch_size if exchange else BATCH)
        ):
            began = time.perf_counter()
            # The shared model steps on the group's batch (16+8+8+4 a step time once every
            # pace is known): its lr is raised as for that batch, AdamW's square-root rule,
            # times the factor found best for it.
            scale = lr_factor * math.sqrt(exchange.group_batch / BATCH) if exchange else 1.0
            for group in optimizer.param_groups:
                group["lr"] = schedule(chunk[0][0], total_steps) * scale
            batch_loss = token_loss(model, torch.stack([seq for _, seq in chunk]))
            optimizer.zero_grad()
            batch_loss.backward()
            optimizer.step()
            loss = batch_loss.item()
            # The artificial slowdown: this learner's "GPU" is `slowdown` times slower, and
            # a batch takes time in proportion to its sequences.
            spare = base_seconds * slowdown * len(chunk) / BATCH - (time.perf_counter() - began)
            if spare > 0:
                time.sleep(spare)
            busy += time.perf_counter() - began
            session.step(samples=len(chunk))
        stats = batches.stats.snapshot()
    exchanged = exchange.stats if exchange is not None else None
    results.put(
        {
            "name": name,
            "slowdown": slowdown,
            "units": stats.units_finished,
            "samples": session.samples,
            "busy": busy,
            "end": time.time(),
            "loss": loss,
            "exchanges": exchanged.exchanges if exchanged else 0,
            "staleness": exchanged.staleness_mean if exchanged else 0.0,
            "blocked": exchanged.blocked_s if exchanged else 0.0,
            "gain": exchanged.noise.gain if exchanged else 1.0,
            "noise_scale": exchanged.noise.scale if exchanged else None,
        }
    )


def lr_factors(text: str) -> dict[str, float]:
    """Parse ``--lr-factors``: ``METHOD=X`` pairs, each overriding that method's default."""
    factors = dict(LR_FACTORS)
    for pair in filter(None, text.split(",")):
        method, _, value = pair.partition("=")
        method = method.strip()
        if method not in LR_FACTORS:
            raise argparse.ArgumentTypeError(
                f"unknown method {method!r}: name {', '.join(LR_FACTORS)}, as in shared=2"
            )
        try:
            factors[method] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{pair!r} is not METHOD=NUMBER, as in shared=2"
            ) from None
        if not 0 < factors[method] < math.inf:
            raise argparse.ArgumentTypeError(f"{pair!r}: the factor must be above 0")
    return factors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="mailbox URL for the run (default: a new file:// dir)")
    parser.add_argument("--shards", type=int, default=48, help="units of work (default 48)")
    parser.add_argument("--batches", type=int, default=8, help="batches per shard (default 8)")
    parser.add_argument(
        "--slowdowns", default="1,2,2,4", help="one slowdown per learner (default 1,2,2,4)"
    )
    parser.add_argument(
        "--batch-ms", type=float, default=40.0, help="the fastest learner's ms per batch"
    )
    parser.add_argument(
        "--independent", action="store_true", help="four independent models, no exchange"
    )
    parser.add_argument(
        "--lr-factors",
        type=lr_factors,
        default=LR_FACTORS,
        metavar="METHOD=X,...",
        help="each method's lr as a multiple of its square-root rule, for shared, lockstep "
        "and alone (default: "
        + ",".join(f"{k}={v:g}" for k, v in LR_FACTORS.items())
        + "); name any of them",
    )
    args = parser.parse_args(argv)
    shared = not args.independent
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="gradientmail-demo-"))
    url = args.url or f"file://{workdir / 'run'}"
    box = gradientmail.from_url(url)
    if not box.supports(gradientmail.Capability.SHARED_ACROSS_PROCESSES):
        print(f"{url} is not shared between processes; use file://, s3://, gs:// or az://")
        return 2
    if next(iter(box.list()), None) is not None:
        print(f"{url} already holds a run; reservations are permanent, use a new URL")
        return 2
    units = write_dataset(workdir / "data", args.shards, args.batches)
    held = write_dataset(workdir / "heldout", 2, 4, seed=1).values()
    heldout = torch.cat([torch.load(path, weights_only=True) for _, path in held])
    heldout = heldout.reshape(-1, SEQ + 1)  # sequences no learner trains on
    total_steps = args.shards * args.batches
    names = [f"learner-{n}" for n in range(len(slowdowns))]
    print(
        f"{len(units)} shards x {args.batches} batches, {len(names)} learners slowed "
        f"{', '.join(f'{s:g}x' for s in slowdowns)}, "
        + (
            "each training its own independent model"
            if args.independent
            else "training one shared model"
        )
        + f"; mailbox {url}"
    )

    ctx = mp.get_context("spawn")
    start = ctx.Barrier(len(names) + 1)
    results = ctx.Queue()
    procs = []
    for n, (name, slowdown) in enumerate(zip(names, slowdowns, strict=True)):
        lane = f"lane{n % 4}-"
        order = [u for u in units if u.startswith(lane)]  # its own lane first
        proc = ctx.Process(
            target=learner,
            args=(
                name,
                slowdown,
                url,
                units,
                order,
                total_steps,
                args.batch_ms / 1000.0,
                shared,
                args.lr_factors["shared"],
                start,
                results,
            ),
        )
        proc.start()
        procs.append(proc)
    start.wait()
    began = time.time()
    evaluate = functools.partial(harness.heldout_loss, heldout=heldout, loss_of=token_loss)
    shared_curve, reports = harness.sample_shared(
        box, TinyLM(), evaluate, results, len(procs), began, shared
    )
    for proc in procs:
        proc.join(timeout=60)
    makespan = max(r["end"] for r in reports) - began

    harness.print_reports(reports, len(units), makespan)
    if shared:
        torch.manual_seed(0)
        sequences = [
            seq for unit in sorted(units.values()) for _, b in load_unit(unit) for seq in b
        ]
        peers = harness.Peers(
            TinyLM,
            sequences,
            token_loss,
            functools.partial(schedule, total=total_steps),
            evaluate,
            args.batch_ms / 1000.0,
        )
        harness.compare(shared_curve, peers, slowdowns, BATCH, makespan, reports, args.lr_factors)
    print(f"\nSee the run:\n  {harness.cli()} status {url}")
    return 0 if all(proc.exitcode == 0 for proc in procs) else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
