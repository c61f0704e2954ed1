"""Failover: makespan when the fastest of 4 learner processes is SIGKILLed halfway through.

Four learner *processes* (A, B, C, D) with per-unit times of 1, 2, 2 and 4 ticks (10 ms by
default) share 800 units on ``file://`` with ``fsync=false`` (a killed process still never
exposes partial bytes, and the figures measure the protocol, not the disk). Each unit is 4
batches, and ``shared_queue`` runs with its default ``prefetch`` (8 items: two units buffered
ahead of the one in training). The lease is 2x the slowest unit's time (8 ticks), renewed
every third of that. The parent watches the ``done/`` listing and SIGKILLs A, the fastest
learner, as soon as it lists half the units.

A learner "trains" a batch by sleeping until its end, ``cost / 4`` after it started. A
batch starts when the previous one ended, or, when the learner had to block in ``next()``
(``queue.stats.wait_s`` grew), when its item arrived. So every wait the queue imposes counts,
and a sleep that overruns on a busy machine does not push later batches back; the wall-clock
figures are printed beside these.

Definitions (``tick`` seconds per cost unit, ``N`` = 800 units, ``c_i`` the per-unit ticks):

* full rate ``R = sum(1 / (c_i * tick))`` over A, B, C, D; survivors' rate ``R' = R - 1 /
  (c_A * tick)``;
* ``n_k``: completion records listed right after the kill (at least the units done at the
  kill, which can only make the bound below smaller);
* **fluid bound of the remaining capacity** ``F = n_k / R + (N - n_k) / R'``: the ``n_k``
  units at full capacity, then the rest at the survivors' combined rate, with work split
  perfectly and nothing lost or trained twice;
* **makespan**: from the start line (every process started and its store opened, then all
  released together) to the end of the last batch trained by any learner.

Goal: makespan / F <= 1.10. Each run is paired with a baseline run without a kill, measured
in the same invocation (makespan / (N / R)): whole units, process start-up and a busy machine
cost something even when nobody dies, and ``/base`` divides the two ratios.

Also printed, in seconds from the kill: when the survivors claimed the last free unit, when
the first of A's units was taken over (its ``reclaimed/`` marker), and when the first item
of a taken-over unit reached a survivor's training loop (from the survivors' event logs,
written by a ``ProgressReporter`` passed as ``session=``). A learner takes over a dead
learner's units only when no unit is free, and only after watching its lease unchanged for a
whole lease by its own clock from then on, so the first reclaimed item comes no sooner than
one lease after the free units run out (the survivors train free units meanwhile). Finally
each run checks that every unit has exactly one completion record (``done/{id}``) and a
claim in the ``done`` state, and names any survivor that failed (a live learner that misses
its renewals for a whole lease, on a busy machine, is declared lost and fenced like a dead
one: it raises ``LeaseLostError`` and the others finish its units).

Run: ``python benchmarks/failover.py [--runs 3] [--tick 0.01] [--prefetch 8]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gradientmail import from_url
from gradientmail._record_codec import decode_record
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns.shared_queue import shared_queue

COSTS = {"A": 1.0, "B": 2.0, "C": 2.0, "D": 4.0}
VICTIM = "A"
BATCHES = 4
UNITS = 800
PREFETCH = 8  # shared_queue's default: two units buffered ahead of the one in training


class EventLog:
    """A ``ProgressReporter`` that appends one JSON line per event, flushed at once, so the
    lines written before a SIGKILL survive it."""

    def __init__(self, learner_id: str, out: TextIO) -> None:
        self._learner_id = learner_id
        self.out = out

    @property
    def learner_id(self) -> str:
        return self._learner_id

    def write(self, event: str, **fields: Any) -> None:
        self.out.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")

    def unit_claimed(self, identifier: str, reclaimed: bool = False, epoch: int = 0) -> None:
        self.write("claimed", unit=identifier, reclaimed=reclaimed, epoch=epoch)

    def unit_released(self, identifier: str, epoch: int = 0) -> None:
        self.write("released", unit=identifier, epoch=epoch)

    def unit_started(self, identifier: str, epoch: int = 0) -> None:
        self.write("started", unit=identifier, epoch=epoch)

    def unit_finished(self, identifier: str, items: int, epoch: int = 0) -> None:
        self.write("finished", unit=identifier, items=items, epoch=epoch)

    def data_waited(self, seconds: float) -> None:
        """Not logged: the failover figures come from unit events only."""


def batches(unit: int) -> Iterator[int]:
    return iter([unit] * BATCHES)


def learner(
    name: str,
    url: str,
    tick: float,
    lease: float,
    prefetch: int,
    log_path: str,
    ready: Any,
    start: Any,
    origin: Any,
) -> None:
    """One learner process: train every item it is given, sleeping to deadlines."""
    box = from_url(url)
    units = {f"u{i:04d}": i for i in range(UNITS)}
    per_batch = COSTS[name] * tick / BATCHES
    with open(log_path, "a", buffering=1) as out:
        log = EventLog(name, out)
        ready.wait()
        start.wait()
        clock = origin.value  # when this learner's last batch ends, had it trained exactly
        overshoot = 0.0
        try:
            with shared_queue(
                units,
                mailbox=box,
                learner_id=name,
                load=batches,
                prefetch=prefetch,
                lease=lease,
                session=log,
            ) as queue:
                stats = queue.stats
                while True:
                    blocked = stats.wait_s
                    try:
                        next(queue)
                    except StopIteration:
                        break
                    got = time.time()
                    if stats.wait_s > blocked:  # the queue made it wait: start on arrival
                        clock = max(clock, got)
                    clock += per_batch
                    pause = clock - time.time()
                    if pause > 0:
                        time.sleep(pause)
                    wall = time.time()
                    overshoot += max(0.0, wall - clock)
                    log.write("trained", end=clock, wall=wall)
            log.write(
                "exit",
                reclaimed=stats.units_reclaimed,
                wait_s=stats.wait_s,
                overshoot=overshoot,
            )
        except BaseException as exc:
            log.write("error", error=f"{type(exc).__name__}: {exc}")
            raise


@dataclass
class Outcome:
    makespan: float
    bound: float
    kill_at: float | None = None
    done_at_kill: int = 0
    exhausted: float | None = None  # last free claim, seconds after the kill
    takeover: float | None = None  # first reclaimed/ marker, seconds after the kill
    first_item: float | None = None  # first item of a taken-over unit, after the kill
    reclaimed: int = 0
    exited: float = 0.0  # last survivor's exit, seconds after the start
    wall: float = 0.0  # wall-clock end of the last batch, seconds after the start
    blocked: float = 0.0  # most seconds any survivor spent blocked in next()
    overshoot: float = 0.0  # most seconds any survivor's sleeps overran
    problems: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        return self.makespan / self.bound

    @property
    def wall_ratio(self) -> float:
        return self.wall / self.bound


def rates(tick: float) -> tuple[float, float]:
    full = sum(1 / (c * tick) for c in COSTS.values())
    return full, full - 1 / (COSTS[VICTIM] * tick)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass  # a line cut by the SIGKILL
    return events


def run_once(tick: float, kill: bool, prefetch: int = PREFETCH) -> Outcome:
    root = Path(tempfile.mkdtemp(prefix="gm-failover-"))
    store = root / "store"
    url = f"file://{store}?fsync=false"
    lease = 2 * max(COSTS.values()) * tick
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(len(COSTS) + 1)
    start = ctx.Event()
    origin = ctx.Value("d", 0.0)
    procs = {
        name: ctx.Process(
            target=learner,
            args=(
                name,
                url,
                tick,
                lease,
                prefetch,
                str(root / f"{name}.log"),
                ready,
                start,
                origin,
            ),
            daemon=True,
        )
        for name in COSTS
    }
    box = from_url(url)
    for proc in procs.values():
        proc.start()
    ready.wait()  # every child has imported and opened the store
    origin.value = time.time()
    start.set()
    full, survivors = rates(tick)
    outcome = Outcome(makespan=0.0, bound=UNITS / full)
    if kill:
        while sum(1 for _ in box.list("done/")) < UNITS // 2:
            time.sleep(0.01)  # polling the listing, as an operator's monitor would
        pid = procs[VICTIM].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        outcome.kill_at = time.time()
        outcome.done_at_kill = sum(1 for _ in box.list("done/"))
        n = outcome.done_at_kill
        outcome.bound = n / full + (UNITS - n) / survivors
    for proc in procs.values():
        proc.join(timeout=120)
    logs = {name: read_log(root / f"{name}.log") for name in COSTS}
    problems = [
        f"{name} exited {proc.exitcode}"
        for name, proc in procs.items()
        if proc.exitcode != 0 and not (kill and name == VICTIM)
    ]
    problems += [
        f"{name}: {e['error']}" for name, events in logs.items() for e in events if "error" in e
    ]
    trained = [e for events in logs.values() for e in events if e["event"] == "trained"]
    outcome.makespan = max(e["end"] for e in trained) - origin.value
    outcome.wall = max(e["wall"] for e in trained) - origin.value
    exits = [e for events in logs.values() for e in events if e["event"] == "exit"]
    outcome.exited = max((e["t"] for e in exits), default=origin.value) - origin.value
    outcome.blocked = max((e["wait_s"] for e in exits), default=0.0)
    outcome.overshoot = max((e["overshoot"] for e in exits), default=0.0)
    problems += check_completions(box)
    if kill:
        takeover(outcome, logs, box)
    outcome.problems = tuple(problems)
    for proc in procs.values():
        if proc.is_alive():
            proc.kill()
    shutil.rmtree(root, ignore_errors=True)
    return outcome


def takeover(outcome: Outcome, logs: dict[str, list[dict[str, Any]]], box: Any) -> None:
    """Fill in the times from the kill to the last free claim, the takeover, the first item."""
    kill_at = outcome.kill_at
    assert kill_at is not None
    survivors = [events for name, events in logs.items() if name != VICTIM]
    claims = [e for events in survivors for e in events if e["event"] == "claimed"]
    free = [e["t"] for e in claims if not e["reclaimed"]]
    if free:
        outcome.exhausted = max(free) - kill_at
    markers = [decode_record(box.get(key)) or {} for key in box.list("reclaimed/")]
    outcome.reclaimed = len(markers)
    times = [m["at"] for m in markers if isinstance(m.get("at"), (int, float))]
    if times:
        outcome.takeover = min(times) - kill_at
    first = []
    for events in survivors:
        taken = {e["unit"] for e in events if e["event"] == "claimed" and e["reclaimed"]}
        first += [e["t"] for e in events if e["event"] == "started" and e["unit"] in taken]
    if first:
        outcome.first_item = min(first) - kill_at


def check_completions(box: Any) -> list[str]:
    """Every unit has exactly one completion record, and its claim says ``done``."""
    expected = {f"u{i:04d}" for i in range(UNITS)}
    done = [key[len("done/") :] for key in box.list("done/")]
    problems = []
    if sorted(done) != sorted(expected):
        missing = len(expected - set(done))
        problems.append(f"{len(done)} completion records for {UNITS} units ({missing} missing)")
    not_done = 0
    for ident in expected:
        claim = parse_claim(box.get("units/" + ident))
        if claim is None or claim.extra.get("state") != "done":
            not_done += 1
    if not_done:
        problems.append(f"{not_done} claims not in the done state")
    return problems


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="kill runs (each with a baseline)")
    parser.add_argument("--tick", type=float, default=0.01, help="seconds per cost unit")
    parser.add_argument("--prefetch", type=int, default=PREFETCH, help="items (4 per unit)")
    args = parser.parse_args()
    tick = args.tick
    full, survivors = rates(tick)
    lease = 2 * max(COSTS.values()) * tick
    print(
        f"{UNITS} units, 4 learner processes, per-unit times "
        + ", ".join(f"{n}={c:g}" for n, c in COSTS.items())
        + f" ticks (1 tick = {tick * 1000:g} ms), {BATCHES} batches a unit, "
        f"prefetch {args.prefetch} items, file:// with fsync off"
    )
    print(
        f"lease {lease * 1000:g} ms (renewed every {lease / 3 * 1000:.1f} ms); "
        f"full rate {full:.1f} units/s, survivors {survivors:.1f} units/s; "
        f"{VICTIM} is SIGKILLed at {UNITS // 2} completion records"
    )
    print(
        f"{'run':>3} {'base x':>6} {'wall':>5} {'n_k':>4} {'makespan':>8} {'F':>6} {'x F':>6} "
        f"{'/base':>6} {'wall':>5} {'blockd':>6} {'late':>6} {'exhaust':>7} {'takeovr':>7} "
        f"{'1stitem':>7} {'redone':>6}  check"
    )
    ratios, walls, excess, first_items = [], [], [], []
    for run in range(1, args.runs + 1):
        base = run_once(tick, kill=False, prefetch=args.prefetch)
        out = run_once(tick, kill=True, prefetch=args.prefetch)
        ratios.append(out.ratio)
        walls.append(out.wall_ratio)
        excess.append(out.ratio / base.ratio)
        if out.first_item is not None:
            first_items.append(out.first_item)
        problems = list(base.problems) + list(out.problems)
        print(
            f"{run:>3} {base.ratio:>6.3f} {base.wall_ratio:>5.2f} {out.done_at_kill:>4} "
            f"{out.makespan:>8.3f} {out.bound:>6.3f} {out.ratio:>6.3f} "
            f"{out.ratio / base.ratio:>6.3f} {out.wall_ratio:>5.2f} {out.blocked:>6.3f} "
            f"{out.overshoot:>6.3f} {seconds(out.exhausted):>7} {seconds(out.takeover):>7} "
            f"{seconds(out.first_item):>7} {out.reclaimed:>6}  "
            + ("ok: one completion per unit" if not problems else "; ".join(problems))
        )
    print(
        "base x: no-kill makespan / (N / R); x F: makespan / F, the fluid bound of the remaining "
        "capacity (goal <= 1.10); /base: x F / base x; wall: the same ratios by wall clock"
    )
    print(
        "blockd / late: most seconds a survivor spent blocked in next() / oversleeping; "
        "exhaust, takeovr, 1stitem: seconds from the kill to the last free claim, the first "
        "takeover and the first item of a taken-over unit; redone: units taken over"
    )
    print(
        f"makespan / F over {len(ratios)} runs: min {min(ratios):.3f}, "
        f"median {statistics.median(ratios):.3f}, max {max(ratios):.3f} (goal <= 1.10: "
        f"{'met' if max(ratios) <= 1.10 else 'MISSED'}); by wall clock "
        f"{min(walls):.3f}-{max(walls):.3f}; over the no-kill baseline "
        f"{min(excess):.3f}-{max(excess):.3f}"
    )
    if first_items:
        print(
            f"kill -> first reclaimed item: {min(first_items):.3f}-{max(first_items):.3f} s "
            f"(lease {lease:.3f} s; a takeover waits for the free units to run out)"
        )


if __name__ == "__main__":
    main()
