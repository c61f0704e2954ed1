"""Many epochs in a loop: wall time against the fluid bound, and how soon each epoch's end
is noticed.

Learners are threads on ``memory://`` that "train" a unit by sleeping its cost (a deadline,
so overshoot does not accumulate). Two ways of running many epochs, measured in the same
run: ``shared_queue(..., epoch=k)`` for each epoch in turn (the barrier loop a new user
writes), and one ``shared_queue(..., epochs=range(n))`` whose epochs flow.

1. **Throughput.** 4 learners with unit costs 1, 2, 2 and 4 x ``--base`` seconds, 10 epochs
   of 48 units. It prints, for each way, the wall time against the fluid bound (all the
   work spread perfectly over the learners' summed speed, no barrier), the ratio of the
   two ways, and the best whole-unit schedule's ratio computed for the same costs, epoch
   by epoch with a barrier, so the barrier loop's ratio left over is what the queue adds.
2. **Notice.** The same 4 learners at a lease of 60 s (polling backs off up to 20 s), 2
   epochs of 5 units that each take ``--long`` seconds on every learner: four run at once,
   then three learners wait while the fifth unit runs. It prints, per epoch, how long
   after the last unit's last item each learner's loop over the epoch ended, against one
   store round trip measured in the same run.

Run: ``python benchmarks/epochs.py [--base 0.05] [--long 20]`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Iterator

from gradientmail import from_url
from gradientmail.patterns.shared_queue import shared_queue

COSTS = {"A": 1.0, "B": 2.0, "C": 2.0, "D": 4.0}


def run(
    epochs: int, size: int, costs: dict[str, float], lease: float, *, flow: bool = False
) -> dict[str, object]:
    """Every learner loops over ``epochs`` (or, with ``flow``, runs them in one queue);
    per epoch, the last item's time and the ends."""
    box = from_url(f"memory://epochs-{uuid.uuid4().hex[:8]}")
    units = {f"u{i:04d}": i for i in range(size)}
    last_item: dict[int, float] = {}
    ends: dict[int, dict[str, float]] = {k: {} for k in range(epochs)}
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(len(costs))

    def learner(name: str) -> None:
        def load(unit: int) -> Iterator[int]:
            time.sleep(costs[name])  # the unit's cost on this learner, not a synchronisation
            yield unit

        try:
            start.wait()
            if flow:
                with shared_queue(
                    units, mailbox=box, learner_id=name, load=load, epochs=range(epochs)
                ) as q:
                    for _ in q:
                        with lock:
                            last_item[q.epoch] = max(last_item.get(q.epoch, 0), time.monotonic())
                ends[epochs - 1][name] = time.monotonic()
                return
            for epoch in range(epochs):
                with shared_queue(
                    units, mailbox=box, learner_id=name, load=load, epoch=epoch, lease=lease
                ) as q:
                    for _ in q:
                        with lock:
                            last_item[epoch] = max(last_item.get(epoch, 0.0), time.monotonic())
                ends[epoch][name] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=learner, args=(n,)) for n in costs]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    notice = {
        k: max(at - last_item[k] for at in ends[k].values()) for k in range(epochs) if ends[k]
    }
    wall = max(max(e.values()) for e in ends.values() if e) - began
    return {"wall": wall, "notice": notice}


def best_schedule(size: int, costs: dict[str, float]) -> float:
    """The best whole-unit schedule of one epoch (greedy earliest finish, optimal here)."""
    finish = [(0.0, name) for name in costs]
    end = 0.0
    for _ in range(size):
        # the learner that would finish a unit first takes it
        best = min(finish, key=lambda f: f[0] + costs[f[1]])
        finish.remove(best)
        done = best[0] + costs[best[1]]
        end = max(end, done)
        finish.append((done, best[1]))
    return end


def round_trip() -> float:
    box = from_url(f"memory://epochs-rtt-{uuid.uuid4().hex[:8]}")
    box.put_if_absent("k", b"x")
    began = time.perf_counter()
    for _ in range(100):
        box.get("k")
    return (time.perf_counter() - began) / 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=float, default=0.05, help="the fastest unit, seconds")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--units", type=int, default=48)
    parser.add_argument("--long", type=float, default=20.0, help="the notice scenario's unit")
    args = parser.parse_args()

    costs = {name: c * args.base for name, c in COSTS.items()}
    result = run(args.epochs, args.units, costs, lease=60.0)
    flowing = float(run(args.epochs, args.units, costs, lease=60.0, flow=True)["wall"])  # type: ignore[arg-type]
    speed = sum(1 / c for c in costs.values())
    fluid = args.epochs * args.units / speed
    scheduled = args.epochs * best_schedule(args.units, costs)
    wall = float(result["wall"])  # type: ignore[arg-type]
    print(
        f"throughput: {args.epochs} epochs x {args.units} units, costs "
        f"{'/'.join(f'{c:g}' for c in costs.values())} s, fluid bound {fluid:.2f}s"
    )
    print(f"  epochs=range(n), flowing: wall {flowing:.2f}s, wall / fluid = {flowing / fluid:.3f}")
    print(f"  epoch=k in a loop: wall {wall:.2f}s, wall / fluid = {wall / fluid:.3f}")
    print(f"  flowing / loop = {flowing / wall:.3f}")
    print(
        f"  best barrier schedule {scheduled:.2f}s ({scheduled / fluid:.3f} x fluid): "
        f"wall / best barrier schedule = {wall / scheduled:.3f}"
    )
    notice = result["notice"]
    print(
        "  notice per epoch (s): " + " ".join(f"{v:.2f}" for v in notice.values())  # type: ignore[attr-defined]
    )

    long = dict.fromkeys(COSTS, args.long)
    rtt = round_trip()
    result = run(2, 5, long, lease=60.0)
    notice = result["notice"]
    print(f"notice: lease 60 s, units of {args.long:g} s, one store round trip {rtt * 1e3:.3f} ms")
    for epoch, late in notice.items():  # type: ignore[attr-defined]
        print(f"  epoch {epoch}: the last learner left {late:.2f}s after the last item")
    worst = max(notice.values())  # type: ignore[attr-defined]
    print(
        f"  worst {worst:.2f}s = {worst / (1 + rtt):.2f} x (1 s + a round trip); "
        f"mean {statistics.fmean(notice.values()):.2f}s"  # type: ignore[attr-defined]
    )


if __name__ == "__main__":
    main()
