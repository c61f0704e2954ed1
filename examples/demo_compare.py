"""The measuring around the demo (``train_shared_queue.py``): not part of the loop to copy.

It samples the shared model's held-out loss while the learners train, trains the same model
in lockstep data parallel on the same batches as the baseline (each step averages one batch
per learner and takes the slowest learner's time, as DDP does), and prints the table of
learners and the time each run took to reach the lockstep run's final loss.
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


def lockstep(
    model: nn.Module,
    batches: list[tuple[int, torch.Tensor]],
    loss_of: Callable[[nn.Module, torch.Tensor], torch.Tensor],
    lr_at: Callable[[int], float],
    slowdowns: list[float],
    base_seconds: float,
    evaluate: Callable[[nn.Module], float],
) -> Curve:
    """Train ``model`` in lockstep data parallel on ``batches``: each step averages one batch
    per learner and takes the slowest learner's time. Returns (seconds, held-out loss)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    width = len(slowdowns)
    clock = 0.0
    curve = [(0.0, evaluate(model))]
    for first in range(0, len(batches), width):
        began = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(first)
        optimizer.zero_grad()
        for _, tokens in batches[first : first + width]:
            (loss_of(model, tokens) / width).backward()
        optimizer.step()
        # Each rank computes its batch at its own pace; the all-reduce waits for the slowest.
        clock += max(base_seconds * max(slowdowns), time.perf_counter() - began)
        curve.append((clock, evaluate(model)))
    return curve


def time_to(curve: Curve, target: float) -> float | None:
    """The first time a (seconds, loss) curve reaches ``target``, or None."""
    return next((t for t, loss in curve if loss <= target), None)


def sample_shared(
    box: Any,
    model: nn.Module,
    evaluate: Callable[[nn.Module], float],
    results: Any,
    learners: int,
    began: float,
    every: int,
) -> tuple[Curve, list[dict[str, Any]]]:
    """Collect the learners' reports; meanwhile sample the shared model's held-out loss."""
    curve: Curve = []
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + 600
    while len(reports) < learners:
        if time.monotonic() > deadline:
            raise TimeoutError("the learners did not finish within 600 s")
        if every:
            try:
                load_shared(model, box)
                curve.append((time.time() - began, evaluate(model)))
            except gradientmail.ConfigurationError:
                pass  # not published yet
        try:
            reports.append(results.get(timeout=0.2))  # also the sampling period
        except queue.Empty:
            continue
    if every:
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


def compare(shared: Curve, steps: Curve, reports: list[dict[str, Any]]) -> None:
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


def cli() -> str:
    """How to run the ``gradientmail`` command from here: the venv's script, if not on PATH."""
    script = Path(sys.executable).parent / "gradientmail"
    if shutil.which("gradientmail") == str(script) or not script.exists():
        return "gradientmail"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)
