"""``gradientmail race URL``: processes race to claim the same keys; print who won what.

Each racer is a separate process with its own mailbox handle. All racers wait on a start
barrier, then try ``put_if_absent`` on every key (each in its own shuffled order), writing
their own name as the value. Afterwards the store is read back: every key must have exactly
one winner, and the stored bytes must name that winner.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import time
import uuid
from collections import Counter
from typing import Any

from gradientmail.mailbox import Mailbox
from gradientmail.urls import from_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``race`` options."""
    parser.add_argument("url", help="mailbox URL, e.g. file:///tmp/box or memory://demo")
    parser.add_argument("--racers", type=int, default=4, help="racing processes (default 4)")
    parser.add_argument("--keys", type=int, default=200, help="keys to race for (default 200)")


def _racer(box: Mailbox, name: str, keys: list[str], barrier: Any, results: Any) -> None:
    order = list(keys)
    random.Random(name).shuffle(order)
    barrier.wait()
    won = [key for key in order if box.put_if_absent(key, name.encode())]
    results.put((name, won))


def race(box: Mailbox, racers: int, keys: int) -> dict[str, list[str]]:
    """Race ``racers`` processes for ``keys`` fresh keys; return each racer's wins.

    Raises:
        AssertionError: a key had two winners, or its stored bytes are not its winner's.
    """
    prefix = f"race-{uuid.uuid4().hex[:8]}"
    names = [f"racer-{i}" for i in range(racers)]
    key_list = [f"{prefix}/k{i:05d}" for i in range(keys)]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(racers)
    results = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(box, n, key_list, barrier, results)) for n in names]
    for proc in procs:
        proc.start()
    wins = dict(results.get(timeout=300) for _ in procs)
    for proc in procs:
        proc.join()
    counts = Counter(key for won in wins.values() for key in won)
    doubles = sorted(key for key, n in counts.items() if n > 1)
    if doubles:
        raise AssertionError(f"{len(doubles)} keys had more than one winner, e.g. {doubles[0]}")
    for name, won in wins.items():
        for key in won:
            stored = box.get(key).decode()
            if stored != name:
                raise AssertionError(f"{key}: won by {name} but stores {stored!r}")
    return wins


def run(args: argparse.Namespace) -> int:
    """Run the race and print the result table."""
    box = from_url(args.url)
    print(f"{args.racers} processes race for {args.keys} keys in {box.url}")
    started = time.perf_counter()
    wins = race(box, args.racers, args.keys)
    elapsed = time.perf_counter() - started
    for name, won in sorted(wins.items()):
        sample = ", ".join(key.rsplit("/", 1)[1] for key in sorted(won)[:5])
        more = " ..." if len(won) > 5 else ""
        print(f"  {name}: won {len(won):4d} keys  ({sample}{more})")
    total = sum(len(w) for w in wins.values())
    print(
        f"every key has exactly one winner ({total}/{args.keys}), and each stored value "
        f"names its winner. {elapsed:.2f} s"
    )
    return 0
