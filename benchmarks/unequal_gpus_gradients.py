"""A bound for ``benchmarks/unequal_gpus.py``: what a gradient mode of the exchange could give.

The issue's "gradient mode" has learners push the gradients of their batches with their
sample counts, and has the learner whose push completes a group's batch take one step of
a shared optimizer: lockstep's steps on all the group's items, without its barrier. Before
building it on a store, this measures its best case. The shared state (the parameters,
AdamW's two moments and the gradients summed so far) lives in shared memory behind one
lock, so a push costs no request, no encoding and no lost race: no store could do better.

Each learner takes a batch in proportion to its pace (the true paces, as lockstep profiled
once does), computes its gradient at the newest version it has read, adds it (a sum over
its items) to the shared sum, and, if the sum now covers the group's batch, takes one AdamW
step on its mean (the same update as ``torch.optim.AdamW``'s defaults, on one flat tensor)
and starts a new sum. It never waits for the others: a gradient is computed at the version
of its step's start, one version stale when another learner's push completed a step
meanwhile. Everything it does, its push and any step included, is padded into its step.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from unequal_gpus_workers import (
    Pacer,
    Plan,
    Snapshots,
    _grad,
    _proportional,
    _ready,
    _setup,
    batch_number,
    fresh_model,
    load_task,
)

#: ``torch.optim.AdamW``'s defaults, which every other method in the benchmark uses.
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.999), 1e-8, 0.01
#: The shared scalars: the version, the items summed so far, AdamW's step count.
VERSION, ITEMS, STEPS = range(3)


def shared_state(ctx: Any, plan: Plan) -> tuple[Any, list[Any], Any]:
    """The lock, the four flat buffers (parameters, two moments, the gradient sum) with the
    parameters set to seed ``plan.seed``'s model, and the shared scalars."""
    model = fresh_model(load_task(plan.task), plan.seed)
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    buffers = [ctx.RawArray("f", flat.numel()) for _ in range(4)]
    torch.frombuffer(buffers[0], dtype=torch.float32).copy_(flat)
    return ctx.Lock(), buffers, ctx.RawArray("d", 3)


def gradient_learner(
    plan: Plan, rank: int, out: Any, start: Any, stop: Any, samples: Any, shared: Any
) -> None:
    """One learner: compute at the newest version read, push, step the shared AdamW when
    the push completes the group's batch."""
    task, model, _ = _setup(plan)
    lock, buffers, scalars = shared
    params, moment, square, summed = (torch.frombuffer(b, dtype=torch.float32) for b in buffers)
    mine_params = list(model.parameters())
    speeds = [1 / p for p in plan.paces]
    sizes = _proportional(speeds, round(plan.batch * sum(speeds) / max(speeds)))
    group, mine, world = sum(sizes), sizes[rank], len(plan.paces)
    local = torch.empty_like(params)
    have = -1.0
    began = _ready(start)
    pacer, snaps = Pacer(plan, rank, plan.paces[rank], began), Snapshots(out, began)
    step = 0
    while not stop.is_set():
        started = time.perf_counter()
        own = pacer.step_seconds(mine)
        with lock:
            if scalars[VERSION] != have:
                have = scalars[VERSION]
                local.copy_(params)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(local, mine_params)
        loss = task.loss(model, task.batch(batch_number(plan, step * world + rank), mine))
        model.zero_grad()
        (loss * mine).backward()  # a sum over items: the shared sum weighs each by its batch
        gradient = torch.cat([_grad(p).reshape(-1) for p in mine_params])
        step += 1
        with lock:
            summed.add_(gradient)
            scalars[ITEMS] += mine
            if scalars[ITEMS] >= group:
                scalars[STEPS] += 1
                mean = summed / scalars[ITEMS]
                _adamw(plan.lr, int(scalars[STEPS]), (params, moment, square), mean)
                summed.zero_()
                scalars[ITEMS] = 0
                scalars[VERSION] += 1
        with samples.get_lock():
            samples.value += mine
        pacer.pad_to(started, own)
        if rank == 0:
            snaps.maybe(model)
    if rank == 0:
        snaps.maybe(model, force=True)
    out.put(("done", rank, {"sizes": sizes}))


def _adamw(lr: float, steps: int, state: tuple[torch.Tensor, ...], gradient: torch.Tensor) -> None:
    """Step ``steps`` of ``torch.optim.AdamW`` (its defaults) on flat tensors, in place:
    ``state`` is the parameters and the two moments."""
    params, moment, square = state
    beta1, beta2 = BETAS
    moment.mul_(beta1).add_(gradient, alpha=1 - beta1)
    square.mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
    params.mul_(1 - lr * WEIGHT_DECAY)
    denominator = (square / (1 - beta2**steps)).sqrt_().add_(EPS)
    params.addcdiv_(moment, denominator, value=-lr / (1 - beta1**steps))
