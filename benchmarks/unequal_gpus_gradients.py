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
step on its mean (``torch.optim.AdamW`` with its defaults, over the shared buffers) and
starts a new sum. It never waits for the others: a gradient is computed at the version
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

#: The shared scalars: the version, the items summed so far.
VERSION, ITEMS = range(2)


def shared_state(ctx: Any, plan: Plan) -> tuple[Any, list[Any], Any]:
    """The lock; the flat buffers of the parameters (set to seed ``plan.seed``'s model),
    AdamW's step count and two moments, and the gradient sum; and the shared scalars."""
    model = fresh_model(load_task(plan.task), plan.seed)
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    n = flat.numel()
    buffers = [ctx.RawArray("f", size) for size in (n, 1, n, n, n)]
    torch.frombuffer(buffers[0], dtype=torch.float32).copy_(flat)
    return ctx.Lock(), buffers, ctx.RawArray("d", 2)


def shared_adamw(lr: float, buffers: list[Any]) -> tuple[torch.optim.AdamW, torch.Tensor]:
    """A ``torch.optim.AdamW`` (its defaults, as every other method uses) whose parameter
    and state are the shared buffers, and the gradient sum: whichever learner steps it, the
    update lands in shared memory (``load_state_dict`` keeps tensors of the parameter's
    dtype and device as they are, so the state stays those buffers)."""
    params, step, moment, square, summed = (
        torch.frombuffer(b, dtype=torch.float32) for b in buffers
    )
    shared = torch.nn.Parameter(params, requires_grad=False)
    optimizer = torch.optim.AdamW([shared], lr=lr)
    state = optimizer.state_dict()
    state["state"] = {0: {"step": step.view(()), "exp_avg": moment, "exp_avg_sq": square}}
    optimizer.load_state_dict(state)
    return optimizer, summed


def gradient_learner(
    plan: Plan, rank: int, out: Any, start: Any, stop: Any, samples: Any, shared: Any
) -> None:
    """One learner: compute at the newest version read, push, step the shared AdamW when
    the push completes the group's batch."""
    task, model, _ = _setup(plan)
    lock, buffers, scalars = shared
    optimizer, summed = shared_adamw(plan.lr, buffers)
    (shared_params,) = optimizer.param_groups[0]["params"]
    mine_params = list(model.parameters())
    speeds = [1 / p for p in plan.paces]
    sizes = _proportional(speeds, round(plan.batch * sum(speeds) / max(speeds)))
    group, mine, world = sum(sizes), sizes[rank], len(plan.paces)
    # The model's parameters become views of one local vector: a new version is one copy.
    local = torch.empty_like(summed)
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(local, mine_params)
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
                local.copy_(shared_params)
        loss = task.loss(model, task.batch(batch_number(plan, step * world + rank), mine))
        model.zero_grad()
        (loss * mine).backward()  # a sum over items: the shared sum weighs each by its batch
        gradient = torch.cat([_grad(p).reshape(-1) for p in mine_params])
        step += 1
        with lock:
            summed.add_(gradient)
            scalars[ITEMS] += mine
            if scalars[ITEMS] >= group:
                shared_params.grad = summed / scalars[ITEMS]
                optimizer.step()
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
