"""The processes of ``benchmarks/unequal_gpus.py``: one per learner or rank, each paced.

Every method trains the same task's model from the same seed on the same batch numbers,
with the task's loss and AdamW; each process pads its steps to its pace so that CPU
contention on a small machine does not decide the result. A step of ``b`` items at pace
``p`` takes ``p x base x b / BATCH`` seconds (times a jitter factor, and times 3 for
learner 0 from ``slow_at`` on).

* :func:`single`: the fastest learner alone.
* :func:`lockstep_rank`: one rank of synchronous data parallelism over gloo. ``sizing``
  ``"equal"`` is DDP with equal batches; ``"static"`` sizes batches in proportion to the
  speed measured over the first steps (profiled once), ``"adaptive"`` re-sizes them every
  20 steps from the step times measured meanwhile, keeping the total; ``diloco`` > 0 runs
  synchronous DiLoCo instead (equal batches, ``diloco`` local steps, Nesterov 0.7 / 0.9).
  Gradients are summed weighted by batch, so a step is one step on the combined batch.
* :func:`exchange_learner`: the documented recipe, a ``shared_queue`` of batch numbers and
  a ``gradientmail.torch.Exchange`` sizing each learner's batch to its speed.
"""

from __future__ import annotations

import importlib.util
import io
import math
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch

PROFILE_STEPS = 5
RESIZE_EVERY = 20
SNAPSHOT_EVERY_S = 0.5


@dataclass(frozen=True)
class Plan:
    """One method's run, as every one of its processes sees it."""

    method: str
    task: str
    seed: int
    lr: float
    paces: tuple[float, ...]
    base_s: float
    batch: int
    sigma: float = 0.0
    fixed: float = 0.0
    slow_at: float | None = None
    kill: tuple[int, float] | None = None
    sizing: str = "equal"
    diloco: int = 0
    url: str = ""
    rendezvous: str = ""
    budget: int = 30_000
    exchange: dict[str, Any] = field(default_factory=dict)


def load_task(path: str) -> ModuleType:
    """Import a task file by path (its functions are looked up by name)."""
    spec = importlib.util.spec_from_file_location("unequal_gpus_task", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot import task file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for name in ("build_model", "batch", "loss", "heldout_loss"):
        if not callable(getattr(module, name, None)):
            raise SystemExit(f"task file {path} defines no function {name}()")
    return module


def fresh_model(task: ModuleType, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return task.build_model()  # type: ignore[no-any-return]


def state_bytes(model: torch.nn.Module) -> bytes:
    """The model's state as bytes (tensors through a queue would be shared-memory handles,
    which die with the process that sent them)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


def batch_number(plan: Plan, index: int) -> int:
    """The task's batch number for the ``index``-th batch of a run: seeds see other data."""
    return plan.seed * 1_000_003 + index


class Pacer:
    """Pads each step of one learner to its pace; its jitter is seeded by learner."""

    def __init__(self, plan: Plan, rank: int, pace: float, began: float) -> None:
        self.plan, self.rank, self.pace, self.began = plan, rank, pace, began
        self.random = random.Random(plan.seed * 1000 + rank)

    def step_seconds(self, items: int) -> float:
        plan = self.plan
        pace = self.pace
        if plan.slow_at is not None and self.rank == 0 and time.time() - self.began >= plan.slow_at:
            pace *= 3  # another job started on the fastest GPU
        jitter = 1.0
        if plan.sigma > 0:
            jitter = math.exp(self.random.gauss(-(plan.sigma**2) / 2, plan.sigma))
        # A step's fixed part (launches, the optimizer's update) does not shrink with its batch.
        share = plan.fixed + (1 - plan.fixed) * items / plan.batch
        return pace * plan.base_s * share * jitter

    def pad(self, started: float, items: int) -> None:
        """Sleep out the rest of a step of ``items`` that began at ``started``."""
        self.pad_to(started, self.step_seconds(items))

    def pad_to(self, started: float, seconds: float) -> None:
        """Sleep until ``seconds`` after ``started``."""
        spare = seconds - (time.perf_counter() - started)
        if spare > 0:
            time.sleep(spare)  # this learner's "GPU" is slower: pacing, not synchronisation

    def killed(self) -> bool:
        kill = self.plan.kill
        return kill is not None and kill[0] == self.rank and time.time() - self.began >= kill[1]


class Snapshots:
    """Rank 0's model states, sent to the parent at most every half second."""

    def __init__(self, out: Any, began: float) -> None:
        self.out, self.began, self.last = out, began, -math.inf

    def maybe(self, model: torch.nn.Module, force: bool = False) -> None:
        now = time.time()
        if force or now - self.last >= SNAPSHOT_EVERY_S:
            self.out.put(("snapshot", now - self.began, state_bytes(model)))
            self.last = now


def _setup(plan: Plan) -> tuple[ModuleType, torch.nn.Module, torch.optim.Optimizer]:
    _exit_with_parent()
    torch.set_num_threads(1)
    task = load_task(plan.task)
    model = fresh_model(task, plan.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=plan.lr)
    return task, model, optimizer


def _exit_with_parent() -> None:
    """End this process once the benchmark that started it is gone (killed, or stopped by
    ``timeout``): a learner waits only for the benchmark's stop, so it would train on."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)  # a watchdog's poll: nothing waits on it
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _ready(start: Any) -> float:
    start.wait()  # every process has imported torch and built its model
    return time.time()


def single(plan: Plan, rank: int, out: Any, start: Any, stop: Any, samples: Any) -> None:
    """The fastest learner alone: batch ``BATCH`` at its pace."""
    task, model, optimizer = _setup(plan)
    began = _ready(start)
    pacer, snaps = Pacer(plan, 0, plan.paces[0], began), Snapshots(out, began)
    index = 0
    while not stop.is_set():
        started = time.perf_counter()
        loss = task.loss(model, task.batch(batch_number(plan, index), plan.batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        index += 1
        with samples.get_lock():
            samples.value += plan.batch
        pacer.pad(started, plan.batch)
        snaps.maybe(model)
    snaps.maybe(model, force=True)
    out.put(("done", rank, None))


def _proportional(speeds: list[float], total: int) -> list[int]:
    """Batches in proportion to ``speeds`` summing to about ``total``, each at least 1."""
    whole = sum(speeds)
    return [max(1, round(total * s / whole)) for s in speeds]


def lockstep_rank(plan: Plan, rank: int, out: Any, start: Any, stop: Any, samples: Any) -> None:
    """One rank of lockstep data parallelism (or synchronous DiLoCo) over gloo."""
    import torch.distributed as dist

    task, model, optimizer = _setup(plan)
    world = len(plan.paces)
    dist.init_process_group(
        "gloo", init_method=f"file://{plan.rendezvous}", rank=rank, world_size=world
    )
    params = list(model.parameters())
    anchor = [p.detach().clone() for p in params]
    momentum = [torch.zeros_like(p) for p in params]
    sizes = [plan.batch] * world
    per_sample: list[float] = []
    began = _ready(start)
    pacer, snaps = Pacer(plan, rank, plan.paces[rank], began), Snapshots(out, began)
    step = 0
    while True:
        started = time.perf_counter()
        mine = sizes[rank]
        # The rank's step on its GPU. The all-reduce and the optimizer's update are padded
        # into it below, as with every other method (DDP overlaps the all-reduce with the
        # backward pass): on two cores the gloo all-reduce of four processes alone took
        # about a quarter of a 50 ms step, which no GPU cluster would pay on top of it.
        own = pacer.step_seconds(mine)
        loss = task.loss(model, task.batch(batch_number(plan, step * world + rank), mine))
        optimizer.zero_grad()
        (loss * mine).backward()  # a sum over items: weighted by batch once all-reduced
        per_sample.append(max(own, time.perf_counter() - started) / mine)
        # one all-reduce carries the gradients, the stop flag and each rank's pace
        tail = torch.zeros(1 + world)
        tail[0] = float(stop.is_set() and rank == 0)
        tail[1 + rank] = sum(per_sample[-RESIZE_EVERY:]) / len(per_sample[-RESIZE_EVERY:])
        step += 1
        with samples.get_lock():
            samples.value += mine
        if plan.diloco:
            # local steps; the ranks meet only at a round (the stop flag travels with it)
            for p in params:
                _grad(p).div_(mine)
            optimizer.step()
            if step % plan.diloco:
                pacer.pad_to(started, own)
                continue
            _diloco_round(dist, params, anchor, momentum, world)
            buffer = tail
            dist.all_reduce(buffer)
        else:
            buffer = torch.cat([*(_grad(p).reshape(-1) for p in params), tail])
            dist.all_reduce(buffer)
            offset = 0
            for p in params:
                n = p.numel()
                _grad(p).copy_(buffer[offset : offset + n].view_as(p) / sum(sizes))
                offset += n
            optimizer.step()
        pacer.pad_to(started, own)  # waiting on slower ranks counts: they pace the step
        if rank == 0:
            snaps.maybe(model)
        paces = buffer[-world:].tolist()
        total = plan.batch * sum(1 / p for p in paces) * min(paces)  # the fastest at BATCH
        if plan.sizing != "equal" and step == PROFILE_STEPS:
            sizes = _proportional([1 / p for p in paces], round(total))
            per_sample.clear()
        elif plan.sizing == "adaptive" and step > PROFILE_STEPS and step % RESIZE_EVERY == 0:
            sizes = _proportional([1 / p for p in paces], sum(sizes))
        if buffer[-world - 1] > 0:
            break
    if rank == 0:
        snaps.maybe(model, force=True)
    out.put(("done", rank, {"sizes": sizes}))
    dist.destroy_process_group()


def _diloco_round(
    dist: Any, params: list[Any], anchor: list[Any], momentum: list[Any], world: int
) -> None:
    """Synchronous DiLoCo's outer step: Nesterov 0.7 / 0.9 on the mean delta."""
    with torch.no_grad():
        for p, a, m in zip(params, anchor, momentum, strict=True):
            delta = a - p
            dist.all_reduce(delta)
            delta /= world
            m.mul_(0.9).add_(delta)
            a.sub_(0.7 * (delta + 0.9 * m))
            p.copy_(a)


def exchange_learner(
    plan: Plan,
    rank: int,
    out: Any,
    start: Any,
    stop: Any,
    samples: Any,
    joined: tuple[str, float, float] | None = None,
) -> None:
    """The recipe: a shared queue of batch numbers, and one shared model (``Exchange``)."""
    import gradientmail
    from gradientmail.patterns.shared_queue import shared_queue
    from gradientmail.torch import Exchange

    task, model, optimizer = _setup(plan)
    box = gradientmail.from_url(plan.url)
    learner, pace, began = joined or (f"learner-{rank}", plan.paces[rank], 0.0)
    units = {f"u{i:06d}": i for i in range(0, plan.budget, 8)}
    exchange = Exchange(
        model,
        mailbox=box,
        learner_id=learner,
        optimizer=optimizer,
        batch_size=plan.batch,
        **plan.exchange,
    )

    def load(first: int) -> Any:
        yield from range(first, first + 8)

    if joined is None:
        began = _ready(start)
    pacer = Pacer(plan, rank, pace, began)
    taken = 0
    with exchange, shared_queue(units, mailbox=box, learner_id=learner, load=load) as indices:
        for index in indices:
            started = time.perf_counter()
            size = exchange.batch_size
            taken += size
            loss = task.loss(model, task.batch(batch_number(plan, index), size))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # the exchange counts this step (and may adopt a new version)
            with samples.get_lock():
                samples.value += size
            pacer.pad(started, size)
            if pacer.killed():
                os._exit(0)  # killed: no final exchange, no release
            if stop.is_set():
                break
    report = {"stats": exchange.stats, "batch": exchange.batch_size, "items": taken, "rank": rank}
    out.put(("done", rank, report))


def _grad(p: torch.Tensor) -> torch.Tensor:
    """``p``'s gradient (every parameter of the task's model gets one each step)."""
    assert p.grad is not None, "a parameter got no gradient"
    return p.grad
