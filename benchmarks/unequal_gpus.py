"""Do unequal GPUs pay? The exchange's recipe against the fastest GPU alone and lockstep.

Four learner processes are padded to step times in proportion to their pace (1, 2, 2, 4 by
default), so the machine's own CPU contention does not decide the result: a step of ``b``
items at pace ``p`` takes ``p x base x b / BATCH`` seconds. Everything a method does in a
step is padded into that time: the optimizer's update, lockstep's all-reduce (DDP overlaps
it with the backward pass on a GPU) and the exchange's hand-off. Only waiting for a slower
rank comes on top, as it would on GPUs. In one run, on the same task, seed and batch
numbers, it trains:

* ``alone``: the fastest learner alone, batch ``BATCH``: what you would do without the
  others;
* ``ddp``: lockstep data parallelism over gloo with equal batches (paced by the slowest);
* ``lockstep``: lockstep with batches in proportion to speed, gradients weighted by batch,
  profiled once over the first steps (LB-BSP, Cannikin and HetSeq do this); the strongest
  synchronous peer, which needs a profiler or a coordinator;
* ``adaptive``: the same, re-sized every 20 steps from measured step times;
* ``diloco``: synchronous DiLoCo (equal batches, Nesterov 0.7 / 0.9), the better of two
  ``every``;
* ``exchange``: the documented recipe, ``gradientmail.torch.Exchange(model,
  optimizer=..., batch_size=BATCH)`` with each learner taking ``exchange.batch_size``
  items a step from a ``shared_queue`` of batch numbers, on ``file://``;
* ``gradients`` (only when named in ``--methods``): the best case of a gradient mode,
  learners pushing gradients into shared memory and the push that completes the group's
  batch taking one shared AdamW step (``unequal_gpus_gradients.py``), with no store.

Every method's learning rate is tuned on a 3-point grid (seed 0, static), and the grid and
choice are printed. Each run stops once the held-out loss reaches the last target, or at
the sample budget or wall cap; every method's curve is scored after its run from snapshots
taken every half second (the exchange's by reading the shared model), so scoring never
takes the learners' CPU.

Scenarios: ``static`` (1/2/2/4), ``mild`` (1/1.25/1.67/2), ``jitter3`` and ``jitter5``
(per-step lognormal factor, sigma 0.3 and 0.5, mean 1), ``wide`` (eight learners at
1/2/2/4/4/8/8/8: stale deltas at an 8:1 speed ratio), ``overhead3`` and ``overhead5``
(static paces, but 30 % or 50 % of a GPU's step at ``BATCH`` items is a fixed part that
no item adds, as kernel launches and the optimizer's update are on a real GPU; the
exchange against the fastest alone), ``slowdown`` (the fastest learner
3x slower from half of static lockstep's time), ``churn`` (learner 1 killed at 40 % of
the static exchange's time, a learner of pace 2 joining at 60 %; exchange only: lockstep
would have to restart).

It prints, per scenario and method: the time to each target as a multiple of the fastest
learner alone's, the parallel efficiency ``(T_alone / T) / R`` with ``R = sum of speeds /
fastest speed``, the loss at the wall times the fastest alone reaches each target, and for
the exchange the share of time ``step()`` blocked, bytes and requests per exchange,
conflicts and staleness; then the goals. Before that, the task's regime: the gradient noise
scale ``B_simple`` (McCandlish et al. 2018) at each target along the fastest learner's
run, against the group's batch: extra data helps only while ``B_simple`` is above it.

Run: ``python benchmarks/unequal_gpus.py`` (tune, then 1 seed of every scenario, about an
hour on 2 cores), ``--seeds 3``, ``--scenarios static,jitter5``, ``--methods
alone,lockstep,exchange`` (each scenario runs those of its methods named), ``--lrs lrs.json``
(skip tuning: a file ``--save-lrs`` wrote), ``--task FILE.py`` for your own model and data
(see ``benchmarks/tasks/bytes_transformer.py``, the default, for what the file defines;
``benchmarks/tasks/noisy_strides.py`` and ``benchmarks/tasks/gaussian_mixture.py`` are
tasks where more data per step clearly helps),
``--exchange '{"gain": true}'`` to give the recipe's ``Exchange`` more keyword arguments
(a JSON object; here, an A/B of the noise gain).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import queue
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import unequal_gpus_report as report
from unequal_gpus_gradients import gradient_learner, shared_state
from unequal_gpus_workers import (
    Plan,
    exchange_learner,
    load_task,
    lockstep_rank,
    single,
)

DEFAULT_TASK = str(Path(__file__).parent / "tasks" / "bytes_transformer.py")
PACES = report.PACES
STATIC = PACES["static"]
#: Learning-rate grids, as multiples of the task's ``LR`` (a good one for ``BATCH`` alone).
#: The methods that step on the group's larger batch start above it. With ``--exchange
#: '{"gain": true}'`` the recipe's best lr lies lower (its small batches' deltas are
#: already raised): give it ``--lrs`` tuned for that.
GRIDS = {
    "alone": (1.0, 1.5, 2.0),
    "ddp": (1.5, 2.0, 3.0),
    "lockstep": (1.5, 2.0, 3.0),
    "diloco": (1.0, 1.5, 2.0),
    "exchange": (1.5, 2.0, 3.0),
    "gradients": (1.5, 2.0, 3.0),
}
SCORE_EVERY_S = 2.0


class Runner:
    """Runs one method's processes for one plan, and scores its curve afterwards."""

    def __init__(self, args: argparse.Namespace, task: Any) -> None:
        self.args, self.task = args, task
        self.cache: dict[str, dict[str, Any]] = {}

    def run(self, plan: Plan, join: tuple[float, float] | None = None) -> dict[str, Any]:
        key = repr(replace(plan, url="", rendezvous="")) + repr(join)
        if key not in self.cache:
            self.cache[key] = self._run(plan, join)
        return self.cache[key]

    def _run(self, plan: Plan, join: tuple[float, float] | None) -> dict[str, Any]:
        ctx = mp.get_context("spawn")
        work = Path(tempfile.mkdtemp(prefix=f"gm-unequal-{plan.method}-"))
        plan = replace(plan, url=f"file://{work / 'run'}", rendezvous=str(work / "rdzv"))
        out, stop, samples = ctx.Queue(), ctx.Event(), ctx.Value("q", 0)
        targets: dict[str, Callable[..., None]] = {
            "alone": single,
            "exchange": exchange_learner,
            "gradients": gradient_learner,
        }
        target = targets.get(plan.method, lockstep_rank)
        ranks = 1 if plan.method == "alone" else len(plan.paces)
        start = ctx.Barrier(ranks + 1)
        extra = (shared_state(ctx, plan),) if plan.method == "gradients" else ()
        procs = [
            ctx.Process(target=target, args=(plan, r, out, start, stop, samples, *extra))
            for r in range(ranks)
        ]
        for proc in procs:
            proc.start()
        start.wait()
        began = time.time()
        sampler = report.SharedSampler(self.task, plan) if plan.method == "exchange" else None
        snapshots: list[tuple[float, bytes]] = []
        done: list[Any] = []
        expected = ranks - (1 if plan.kill else 0)
        joined = False
        last_score, scored = began, math.inf
        while len(done) < expected + int(joined):
            now = time.time()
            if sampler is not None:
                sampler.take(now - began, snapshots)
            if join and not joined and now - began >= join[0]:
                joined = True
                args = (plan, ranks, out, None, stop, samples, ("joiner", join[1], began))
                procs.append(ctx.Process(target=exchange_learner, args=args))
                procs[-1].start()
            if snapshots and now - last_score >= SCORE_EVERY_S:
                last_score, scored = now, report.score(self.task, plan, snapshots[-1][1])
            if (
                scored <= self.args.targets[-1]
                or samples.value >= plan.budget
                or now - began >= self.args.cap
            ):
                stop.set()
            try:
                message = out.get(timeout=0.25 if sampler is None else 0.1)
            except queue.Empty:
                continue
            if message[0] == "snapshot":
                snapshots.append((message[1], message[2]))
            else:
                done.append(message[2])
        wall = time.time() - began
        if sampler is not None:
            sampler.take(wall, snapshots)
        for proc in procs:
            proc.join(timeout=120)
        shutil.rmtree(work, ignore_errors=True)
        curve = [
            (at, report.score(self.task, plan, state))
            for at, state in sorted(snapshots, key=lambda s: s[0])
        ]
        return {
            "curve": curve,
            "wall": wall,
            "samples": samples.value,
            "reports": [d for d in done if d],
            "snapshots": snapshots if plan.method == "alone" else [],
            "moved": sampler.moved if sampler is not None else [],
        }


def base_plan(args: argparse.Namespace, method: str, seed: int, lr: float) -> Plan:
    return Plan(
        method=method,
        task=args.task,
        seed=seed,
        lr=lr,
        paces=STATIC,
        base_s=args.base_ms / 1000,
        batch=args.batch,
        sizing={"lockstep": "static", "adaptive": "adaptive"}.get(method, "equal"),
        budget=args.budget,
        exchange=args.exchange if method == "exchange" else {},
    )


def tune(runner: Runner, args: argparse.Namespace) -> dict[str, Any]:
    """Each method's best learning rate on its grid (seed 0, static); DiLoCo's ``every`` too."""
    chosen: dict[str, Any] = {}
    for method in args.methods:
        grid_name = "lockstep" if method == "adaptive" else method
        if method == "adaptive" and "lockstep" in chosen:
            chosen[method] = dict(chosen["lockstep"])
            continue
        rows = []
        for factor in GRIDS[grid_name]:
            lr = args.lr * factor
            plan = replace(
                base_plan(args, method, 0, lr),
                diloco=args.diloco_every[0] if method == "diloco" else 0,
            )
            rows.append((lr, plan.diloco, runner.run(plan)))
        if method == "diloco":
            best_lr = min(rows, key=lambda r: report.rank_key(r[2]["curve"], args.targets))[0]
            for every in args.diloco_every[1:]:
                plan = replace(base_plan(args, method, 0, best_lr), diloco=every)
                rows.append((best_lr, every, runner.run(plan)))
        best = min(rows, key=lambda r: report.rank_key(r[2]["curve"], args.targets))
        chosen[method] = {"lr": best[0], "every": best[1]}
        report.print_grid(method, rows, best, args.targets)
    return chosen


def scenario_plans(name: str, reference: Any) -> tuple[dict[str, Any], list[str]]:
    """What a scenario changes in a plan, and the methods it compares."""
    everyone = ["alone", "ddp", "lockstep", "adaptive", "diloco", "exchange", "gradients"]
    if name == "static":
        return {}, everyone
    if name == "mild":
        return {"paces": PACES["mild"]}, ["alone", "lockstep", "exchange", "gradients"]
    if name.startswith("jitter"):
        return {"sigma": int(name[-1]) / 10}, [
            "alone",
            "lockstep",
            "adaptive",
            "exchange",
            "gradients",
        ]
    if name.startswith("overhead"):
        # Lockstep's batches in proportion to pace are the wrong peer here: with a fixed
        # part, a GPU's step time is not in proportion to its batch.
        return {"fixed": int(name[-1]) / 10}, ["alone", "exchange"]
    if name == "slowdown":
        return {"slow_at": 0.5 * reference("lockstep")}, [
            "alone",
            "lockstep",
            "adaptive",
            "exchange",
            "gradients",
        ]
    if name == "churn":
        t = reference("exchange")
        return {"kill": (1, 0.4 * t), "join": (0.6 * t, 2.0)}, ["alone", "exchange"]
    if name == "wide":
        return {"paces": PACES["wide"]}, ["alone", "lockstep", "exchange"]
    raise SystemExit(f"unknown scenario {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task", default=DEFAULT_TASK, help="a task file (default: the byte transformer)"
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario (default 1)")
    parser.add_argument(
        "--scenarios",
        default="static,mild,jitter3,jitter5,slowdown,churn",
        help="comma-separated, of static, mild, jitter3, jitter5, slowdown, churn, wide, "
        "overhead3, overhead5",
    )
    parser.add_argument(
        "--methods",
        default="alone,ddp,lockstep,adaptive,diloco,exchange",
        help="comma-separated; each scenario runs those of its methods named",
    )
    parser.add_argument("--targets", default=None, help="held-out losses, easiest first")
    parser.add_argument("--budget", type=int, default=40_000, help="samples a run, at most")
    parser.add_argument("--cap", type=float, default=150.0, help="seconds a run, at most")
    parser.add_argument(
        "--base-ms", type=float, default=None, help="the fastest learner's padded step, in ms"
    )
    parser.add_argument(
        "--diloco-every", default="10,40", help="DiLoCo's local steps, tried in turn"
    )
    parser.add_argument("--lrs", default=None, help="a JSON file of chosen lrs: skip tuning")
    parser.add_argument("--save-lrs", default=None, help="write the chosen lrs to this file")
    parser.add_argument(
        "--exchange", default="{}", help="more keyword arguments of the recipe's Exchange (JSON)"
    )
    args = parser.parse_args()
    args.exchange = json.loads(args.exchange)
    if not isinstance(args.exchange, dict):
        raise SystemExit("--exchange takes a JSON object, such as '{\"gain\": true}'")
    task = load_task(args.task)
    args.batch = int(getattr(task, "BATCH", 16))
    args.lr = float(getattr(task, "LR", 3e-3))
    args.base_ms = args.base_ms or float(getattr(task, "BASE_MS", 60.0))
    args.methods = args.methods.split(",")
    args.diloco_every = [int(x) for x in args.diloco_every.split(",")]
    targets = args.targets.split(",") if args.targets else getattr(task, "TARGETS", None)
    if not targets:
        raise SystemExit("give --targets (the task file sets no TARGETS)")
    args.targets = sorted((float(t) for t in targets), reverse=True)
    report.check_pace(task, args)
    runner = Runner(args, task)
    if args.lrs:
        chosen = json.loads(Path(args.lrs).read_text())
        if "lockstep" in chosen:  # as tuning does: adaptive lockstep is lockstep re-sized
            chosen.setdefault("adaptive", dict(chosen["lockstep"]))
        missing = [m for m in args.methods if m not in chosen]
        if missing:
            raise SystemExit(
                f"{args.lrs} has no lr for {', '.join(missing)}: leave out --lrs to tune"
                " every method, or leave those out of --methods"
            )
    else:
        chosen = tune(runner, args)
    if args.save_lrs:
        Path(args.save_lrs).write_text(json.dumps(chosen, indent=1))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    calm: list[dict[str, Any]] = []  # the static exchange of each seed, churn's reference
    for seed in range(args.seeds):

        def reference(method: str, seed: int = seed) -> float:
            """The static run's time to the last target (run once, then cached)."""
            plan = base_plan(args, method, seed, chosen[method]["lr"])
            return report.time_to(runner.run(plan)["curve"], args.targets[-1])

        for name in args.scenarios.split(","):
            changes, methods = scenario_plans(name, reference)
            methods = [m for m in methods if m in args.methods]  # each scenario's, asked for
            join = changes.pop("join", None)
            for method in methods:
                plan = replace(
                    base_plan(args, method, seed, chosen[method]["lr"]),
                    diloco=chosen[method]["every"] if method == "diloco" else 0,
                    **(changes if method in ("exchange",) or "kill" not in changes else {}),
                )
                result = runner.run(plan, join if method == "exchange" else None)
                results.setdefault(name, {}).setdefault(method, []).append(result)
            report.print_seed(name, seed, results[name], args)
        if seed == 0 and "static" in results and "alone" in results["static"]:
            report.print_regime(task, args, results["static"]["alone"][0])
        if "exchange" in results.get("churn", {}):  # run for the churn's timing: cached
            calm.append(runner.run(base_plan(args, "exchange", seed, chosen["exchange"]["lr"])))
    report.print_summary(results, args, calm)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    main()
