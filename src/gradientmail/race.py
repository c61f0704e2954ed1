"""``gradientmail race URL``: racers claim the same keys at once; print who won what.

Racers are separate processes, each with its own mailbox handle (threads for a mailbox that
is not shared across processes, such as ``memory://``). All wait on a start barrier and then
call ``put_if_absent`` on every key; afterwards each key is read back. Every key must have
exactly one winner, whose bytes are the ones stored. The race machinery is the conformance
suite's (:mod:`gradientmail.conformance.races`).
"""

from __future__ import annotations

import argparse
import time

from gradientmail.errors import AtomicityViolationError
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.urls import from_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``race`` options."""
    parser.add_argument("url", help="mailbox URL, e.g. file:///tmp/box or memory://demo")
    parser.add_argument("--racers", type=int, default=4, help="racers (default 4)")
    parser.add_argument("--keys", type=int, default=200, help="keys to race for (default 200)")


def race(box: Mailbox, racers: int, keys: int) -> dict[str, list[str]]:
    """Race ``racers`` for ``keys`` fresh keys in ``box``; return the keys each racer won.

    Raises:
        AtomicityViolationError: a key had two winners, none, or holds the wrong bytes.
    """
    from gradientmail.conformance.races import race_put_if_absent

    shared = box.supports(Capability.SHARED_ACROSS_PROCESSES)
    report = race_put_if_absent(
        box, racers=racers, keys=keys, mode="processes" if shared else "threads"
    )
    if not report.ok:
        raise AtomicityViolationError(f"the race on {box.url} failed: {report.counterexample()}")
    wins: dict[str, list[str]] = {name: [] for name in report.racers}
    for key, (winner,) in report.winners.items():
        wins[winner].append(key)
    return wins


def run(args: argparse.Namespace) -> int:
    """Run the race and print the result table."""
    box = from_url(args.url)
    shared = box.supports(Capability.SHARED_ACROSS_PROCESSES)
    kind = "processes" if shared else "threads"
    print(f"{args.racers} {kind} race for {args.keys} keys in {box.url}")
    started = time.perf_counter()
    wins = race(box, args.racers, args.keys)
    elapsed = time.perf_counter() - started
    for name, won in sorted(wins.items()):
        print(f"  {name}: won {len(won):4d} keys")
    print(
        f"every key has exactly one winner, and each stored value is its winner's ({elapsed:.2f} s)"
    )
    return 0
