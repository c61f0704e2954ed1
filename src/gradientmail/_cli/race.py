"""``gradientmail race URL``: racers claim the same keys at once; print who won what.

The race is :func:`gradientmail.conformance._races.race_winners`: separate processes (threads
for a mailbox not shared across processes), a start barrier, then ``put_if_absent`` on every
key, and each key read back. The raced keys are deleted afterwards, unless ``--keep``.
"""

from __future__ import annotations

import argparse
import time

from gradientmail._urls import from_url
from gradientmail.conformance._races import race_winners
from gradientmail.mailbox import Capability


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``race`` options."""
    parser.add_argument("url", help="mailbox URL, e.g. file:///tmp/box or memory://demo")
    parser.add_argument("--racers", type=int, default=4, help="racers (default 4)")
    parser.add_argument("--keys", type=int, default=200, help="keys to race for (default 200)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the raced keys (default: delete them after)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the race and print the result table."""
    box = from_url(args.url)
    shared = box.supports(Capability.SHARED_ACROSS_PROCESSES)
    kind = "processes" if shared else "threads"
    print(f"{args.racers} {kind} race for {args.keys} keys in {box.url}")
    started = time.perf_counter()
    wins = race_winners(box, args.racers, args.keys, keep=args.keep)
    elapsed = time.perf_counter() - started
    for name, won in sorted(wins.items()):
        print(f"  {name}: won {len(won):4d} keys")
    print(
        f"every key has exactly one winner, and each stored value is its winner's ({elapsed:.2f} s)"
    )
    return 0
