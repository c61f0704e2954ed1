"""The measuring around the demo (``train_shared_queue.py``): not part of the loop to copy.

It samples the shared model's held-out loss while the learners train; then, on the same
sequences in the same order with the same lr schedule, it trains the same model as the two
peers a user would otherwise pick: the fastest learner alone, and lockstep data parallel
with batches in proportion to speed (each rank busy for the same time per step). Their step
times are the learners' padded ones (the real compute when longer), on a virtual clock.
It prints the table of learners, and each run's held-out loss at the shared run's wall time.
"""

from __future__ import annotations

import queue
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradientmail
from gradientmail.torch import load_shared

#: A (seconds, held-out loss) curve.
Curve = list[tuple[float, float]]


def heldout_loss(
    model: nn.Module,
    heldout: torch.Tensor,
    loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
) -> float:
    """The mean loss of ``model`` on held-out batches."""
    with torch.no_grad():
        return float(loss_of(model, heldout))


class Peers:
    """Trains the same model as the shared run's peers, on ``sequences`` in order.

    Args:
        build: makes the model, from the same seed as the learners'.
        sequences: every training sequence, in the order the peers take them.
        loss_of: the loss of a model on a stack of sequences.
        lr_at: the learning rate at a global step (sequences taken / ``BATCH``).
        evaluate: the held-out loss of a model.
        base_seconds: the fastest learner's seconds per batch of ``BATCH`` sequences.
    """

    def __init__(
        self,
        build: Callable[[], nn.Module],
        sequences: list[torch.Tensor],
        loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
        lr_at: Callable[[int], float],
        evaluate: Callable[[nn.Module], float],
        base_seconds: float,
    ) -> None:
        self.build, self.sequences, self.loss_of = build, sequences, loss_of
        self.lr_at, self.evaluate, self.base_seconds = lr_at, evaluate, base_seconds

    def train(
        self, batch: int, reference: int, step_seconds: float, until: float, lr_scale: float = 1.0
    ) -> Curve:
        """One model, ``batch`` sequences a step, each step ``step_seconds`` (or its real
        compute, when longer), at ``lr_scale`` times the schedule's lr, until ``until``
        seconds or the data runs out."""
        torch.manual_seed(0)
        model = self.build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
        clock, taken = 0.0, 0
        curve = [(0.0, self.evaluate(model))]
        while clock < until and taken < len(self.sequences):
            began = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = self.lr_at(taken // reference) * lr_scale
            tokens = torch.stack(self.sequences[taken : taken + batch])
            taken += len(tokens)
            optimizer.zero_grad()
            self.loss_of(model, tokens).backward()
            optimizer.step()
            clock += max(step_seconds, time.perf_counter() - began)
            curve.append((clock, self.evaluate(model)))
        return curve


def loss_at(curve: Curve, seconds: float) -> float:
    """The held-out loss of the last point of ``curve`` at or before ``seconds``."""
    return [loss for t, loss in curve if t <= seconds][-1]


def sample_shared(
    box: Any,
    model: nn.Module,
    evaluate: Callable[[nn.Module], float],
    results: Any,
    learners: int,
    began: float,
    shared: bool,
) -> tuple[Curve, list[dict[str, Any]]]:
    """Collect the learners' reports; meanwhile sample the shared model's held-out loss."""
    curve: Curve = []
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + 600
    while len(reports) < learners:
        if time.monotonic() > deadline:
            raise TimeoutError("the learners did not finish within 600 s")
        if shared:
            try:
                load_shared(model, box)
                curve.append((time.time() - began, evaluate(model)))
            except gradientmail.ConfigurationError:
                pass  # not published yet
        try:
            reports.append(results.get(timeout=0.2))  # also the sampling period
        except queue.Empty:
            continue
    if shared:
        load_shared(model, box)  # the final version, after everyone left
        end = max(r["end"] for r in reports) - began
        curve.append((end, evaluate(model)))
    reports.sort(key=lambda r: r["name"])
    return curve, reports


def print_reports(reports: list[dict[str, Any]], units: int, makespan: float) -> None:
    """One line per learner, then the makespan beside a fixed split's."""
    print(
        f"\n{'learner':<10} {'slowdown':>8} {'units':>6} {'samples':>8} {'busy s':>7} {'loss':>6}"
    )
    for r in reports:
        print(
            f"{r['name']:<10} {r['slowdown']:>7g}x {r['units']:>6} {r['samples']:>8} "
            f"{r['busy']:>7.1f} {r['loss']:>6.3f}"
        )
    # A fixed split gives every learner units/N shards at its measured pace per shard.
    per_learner = units / len(reports)
    fixed = max(r["busy"] / r["units"] * per_learner for r in reports if r["units"])
    print(
        f"\nmakespan {makespan:.1f}s with the shared queue; a fixed split of "
        f"{per_learner:g} shards each would take {fixed:.1f}s ({fixed / makespan:.1f}x longer)"
    )


def compare(
    shared: Curve,
    peers: Peers,
    slowdowns: list[float],
    batch: int,
    makespan: float,
    reports: list[dict[str, Any]],
    factors: dict[str, float],
) -> None:
    """Print the shared model's final and best held-out loss, and its peers' at equal wall
    time: the fastest learner alone, and lockstep with batches in proportion to speed, each
    at ``factors[method]`` times its square-root rule's lr."""
    fastest = min(slowdowns)
    sizes = [max(1, round(batch * fastest / s)) for s in slowdowns]
    step = peers.base_seconds * max(s * b / batch for s, b in zip(slowdowns, sizes, strict=True))
    alone = peers.train(batch, batch, peers.base_seconds * fastest, makespan, factors["alone"])
    # lockstep's lr is raised for its batch by the rule the shared model's learners use
    lockstep_scale = factors["lockstep"] * (sum(sizes) / batch) ** 0.5
    lockstep = peers.train(sum(sizes), batch, step, makespan, lockstep_scale)
    exchanges = sum(r["exchanges"] for r in reports)
    staleness = sum(r["staleness"] * r["exchanges"] for r in reports) / max(1, exchanges)
    blocked = sum(r["blocked"] for r in reports) / max(1e-9, sum(r["busy"] for r in reports))
    final = shared[-1][1]
    best_t, best = min(shared, key=lambda point: point[1])
    print(
        f"\none shared model: final held-out loss {final:.3f} at {makespan:.1f}s (best "
        f"{best:.3f} at {best_t:.1f}s); {exchanges} exchanges, mean staleness "
        f"{staleness:.1f} versions, step() blocked {blocked:.2%} of the learners' time"
    )
    scales = sorted(r["noise_scale"] for r in reports if r["noise_scale"] is not None)
    if scales:
        print(
            f"the learners' gradients put the noise scale at {scales[len(scales) // 2]:.0f} "
            f"items against a group batch of {sum(sizes)}: AdamW steps on the smaller "
            f"batches were raised by a noise gain of up to {max(r['gain'] for r in reports):.2f}"
        )
    print(
        f"at the same wall time ({makespan:.1f}s), on the same sequences and lr schedule "
        f"(x sqrt(batch / {batch}), then x {factors['shared']:g} for the shared model):"
    )
    print(
        f"  the fastest learner alone ({batch} a step, x {factors['alone']:g}):       "
        f"held-out loss {loss_at(alone, makespan):.3f}"
    )
    print(
        f"  lockstep, batches in proportion to speed ({'+'.join(map(str, sizes))} a step, "
        f"x {factors['lockstep']:g}): held-out loss {loss_at(lockstep, makespan):.3f}"
    )


def cli() -> str:
    """How to run the ``gradientmail`` command from here: the venv's script, if not on PATH."""
    script = Path(sys.executable).parent / "gradientmail"
    if shutil.which("gradientmail") == str(script) or not script.exists():
        return "gradientmail"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)
