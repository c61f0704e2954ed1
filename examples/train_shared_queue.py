"""Four learners of unequal speed train one model, sharing one dataset through the mailbox.

The README's demo. It writes a small synthetic token dataset (48 shards), then starts four
learner processes, slowed down 1x, 2x, 2x and 4x, that share the shards through a mailbox
(``file://`` in a temporary directory unless you pass ``--url``). Nobody knows anyone's
speed: the fast learner simply claims more shards, and all four finish together.

**All four train one shared model** (a tiny language model on CPU, with a learning-rate
schedule driven by the global step stored with each batch): each trains locally, and every
``--every`` steps applies its progress to the shared parameters through the mailbox
(``gradientmail.torch.Exchange``), never waiting for the others. The main process samples
the shared model's held-out loss as it goes. Then, in the same run, it trains the same
model in lockstep data parallel (what DDP does: each step averages one batch from each of
the four learners, and waits for the slowest), and prints the time each took to reach the
lockstep run's final loss. ``--independent`` trains four separate models instead, as
before. For DDP itself, see ``train_ddp.py``; for a preprocessing job, ``preprocess.py``.

    python examples/train_shared_queue.py            # about 30 s; no network, no GPU
    gradientmail status URL --plot run.png            # the command it prints at the end

Each learner's loop is the one a real run uses::

    with session, Exchange(model, mailbox=box, learner_id=name, every=8,
                           outer="delayed-nesterov") as exchange, \
            shared_queue(shards, mailbox=box, learner_id=name, load=load_unit,
                         order=my_lane_first) as batches:
        for step, tokens in batches:
            set_lr(optimizer, schedule(step))
            ...train...
            exchange.step()
            session.step(samples=len(tokens))
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import queue
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradientmail
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session
from gradientmail.torch import Exchange, load_shared

VOCAB = 64
SEQ = 32
BATCH = 16


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


def schedule(step: int, total: int, base: float = 3e-3, warmup: int = 20) -> float:
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
    every: int,
    start: Any,
    results: Any,
) -> None:
    """Train on the shards this learner claims; report units, samples and busy time."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    box = gradientmail.from_url(url)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    loss_fn = nn.CrossEntropyLoss()
    busy = 0.0
    loss = float("nan")
    start.wait()  # every process has imported torch and built its model
    session = Session(box, name, publish_every=1.0)
    # every=0: an independent model. Otherwise the shared one: an Exchange that never waits.
    # Delayed Nesterov: momentum built from a round of learners' deltas, as DiLoCo's outer
    # step is, but without waiting for the round (docs/exchange.md has both rules' figures).
    exchange = (
        Exchange(model, mailbox=box, learner_id=name, every=every, outer="delayed-nesterov")
        if every
        else None
    )
    with (
        session,
        exchange or contextlib.nullcontext(),
        shared_queue(units, mailbox=box, learner_id=name, load=load_unit, order=order) as batches,
    ):
        for step, tokens in batches:
            began = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = schedule(step, total_steps)
            logits = model(tokens[:, :-1])
            batch_loss = loss_fn(logits.reshape(-1, VOCAB), tokens[:, 2:].reshape(-1))
            optimizer.zero_grad()
            batch_loss.backward()
            optimizer.step()
            loss = batch_loss.item()
            # The artificial slowdown: this learner's "GPU" is `slowdown` times slower.
            spare = base_seconds * slowdown - (time.perf_counter() - began)
            if spare > 0:
                time.sleep(spare)
            busy += time.perf_counter() - began
            if exchange is not None:
                exchange.step()
            session.step(samples=tokens.shape[0])
        stats = batches.stats.snapshot()
    shared = exchange.stats if exchange is not None else None
    results.put(
        {
            "name": name,
            "slowdown": slowdown,
            "units": stats.units_finished,
            "samples": session.samples,
            "busy": busy,
            "end": time.time(),
            "loss": loss,
            "exchanges": shared.exchanges if shared else 0,
            "staleness": shared.staleness_mean if shared else 0.0,
            "blocked": shared.blocked_s if shared else 0.0,
        }
    )


# -- held-out loss, and the lockstep baseline --------------------------------------------------


def heldout_loss(model: nn.Module, heldout: torch.Tensor) -> float:
    """The mean next-token loss on held-out batches."""
    with torch.no_grad():
        logits = model(heldout[:, :-1])
        targets = heldout[:, 2:].reshape(-1)
        return float(nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets))


def lockstep(
    units: dict[str, Any], slowdowns: list[float], base_seconds: float, heldout: torch.Tensor
) -> list[tuple[float, float]]:
    """Lockstep data parallel on the same batches: each step averages one batch per learner
    and takes the slowest learner's time, as DDP does. Returns (seconds, held-out loss)."""
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    batches = [b for unit in sorted(units.values()) for b in load_unit(unit)]
    total = len(batches)
    width = len(slowdowns)
    clock = 0.0
    curve = [(0.0, heldout_loss(model, heldout))]
    for first in range(0, total, width):
        began = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = schedule(first, total)
        optimizer.zero_grad()
        for _, tokens in batches[first : first + width]:
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 2:].reshape(-1))
            (loss / width).backward()
        optimizer.step()
        # Each rank computes its batch at its own pace; the all-reduce waits for the slowest.
        clock += max(base_seconds * max(slowdowns), time.perf_counter() - began)
        curve.append((clock, heldout_loss(model, heldout)))
    return curve


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """The first time a (seconds, loss) curve reaches ``target``, or None."""
    return next((t for t, loss in curve if loss <= target), None)


# -- the run ----------------------------------------------------------------------------------


def sample_shared(
    box: Any, heldout: torch.Tensor, results: Any, learners: int, began: float, every: int
) -> tuple[list[tuple[float, float]], list[dict[str, Any]]]:
    """Collect the learners' reports; meanwhile sample the shared model's held-out loss."""
    model = TinyLM()
    curve: list[tuple[float, float]] = []
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + 600
    while len(reports) < learners:
        if time.monotonic() > deadline:
            raise TimeoutError("the learners did not finish within 600 s")
        if every:
            try:
                load_shared(model, box)
                curve.append((time.time() - began, heldout_loss(model, heldout)))
            except gradientmail.ConfigurationError:
                pass  # not published yet
        try:
            reports.append(results.get(timeout=0.2))  # also the sampling period
        except queue.Empty:
            continue
    if every:
        load_shared(model, box)  # the final version, after everyone left
        end = max(r["end"] for r in reports) - began
        curve.append((end, heldout_loss(model, heldout)))
    return curve, reports


def compare(
    shared: list[tuple[float, float]], steps: list[tuple[float, float]], reports: list[Any]
) -> None:
    """Print the time each run took to reach the lockstep run's final loss (+1 %)."""
    target = steps[-1][1] * 1.01
    ours, theirs = time_to(shared, target), time_to(steps, target)
    exchanges = sum(r["exchanges"] for r in reports)
    staleness = sum(r["staleness"] * r["exchanges"] for r in reports) / max(1, exchanges)
    blocked = sum(r["blocked"] for r in reports) / max(1e-9, sum(r["busy"] for r in reports))
    print(
        f"\none shared model: held-out loss {shared[-1][1]:.3f} at {shared[-1][0]:.1f}s; "
        f"{exchanges} exchanges, mean staleness {staleness:.1f} versions, step() blocked "
        f"{blocked:.2%} of the learners' time"
    )
    print(
        f"lockstep data parallel (each step at the slowest learner's pace), same batches: "
        f"held-out loss {steps[-1][1]:.3f} at {steps[-1][0]:.1f}s"
    )
    if ours is None or theirs is None:
        print(f"time to loss {target:.3f}: the shared model did not reach it")
        return
    print(
        f"time to loss {target:.3f} (lockstep's final + 1 %): shared model {ours:.1f}s, "
        f"lockstep {theirs:.1f}s ({ours / theirs:.2f}x)"
    )


def _cli() -> str:
    """How to run the ``gradientmail`` command from here: the venv's script, if not on PATH."""
    script = Path(sys.executable).parent / "gradientmail"
    if shutil.which("gradientmail") == str(script) or not script.exists():
        return "gradientmail"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


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
    parser.add_argument("--every", type=int, default=8, help="local steps between exchanges")
    parser.add_argument(
        "--independent", action="store_true", help="four independent models, no exchange"
    )
    args = parser.parse_args(argv)
    every = 0 if args.independent else args.every
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
                every,
                start,
                results,
            ),
        )
        proc.start()
        procs.append(proc)
    start.wait()
    began = time.time()
    shared_curve, reports = sample_shared(box, heldout, results, len(procs), began, every)
    reports.sort(key=lambda r: r["name"])
    for proc in procs:
        proc.join(timeout=60)
    makespan = max(r["end"] for r in reports) - began

    print(
        f"\n{'learner':<10} {'slowdown':>8} {'units':>6} {'samples':>8} {'busy s':>7} {'loss':>6}"
    )
    for r in reports:
        print(
            f"{r['name']:<10} {r['slowdown']:>7g}x {r['units']:>6} {r['samples']:>8} "
            f"{r['busy']:>7.1f} {r['loss']:>6.3f}"
        )
    # A fixed split gives every learner len(units)/N shards at its measured pace per shard.
    per_learner = len(units) / len(reports)
    fixed = max(r["busy"] / r["units"] * per_learner for r in reports if r["units"])
    print(
        f"\nmakespan {makespan:.1f}s with the shared queue; a fixed split of "
        f"{per_learner:g} shards each would take {fixed:.1f}s ({fixed / makespan:.1f}x longer)"
    )
    if every:
        compare(shared_curve, lockstep(units, slowdowns, args.batch_ms / 1000.0, heldout), reports)
    print(f"\nSee the run:\n  {_cli()} status {url} --plot run.png")
    return 0 if all(proc.exitcode == 0 for proc in procs) else 1


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
