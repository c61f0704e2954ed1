"""``gradientmail status URL``: print a run's learners, units left and ETA (see
:mod:`gradientmail.status`). ``--watch`` redraws until the run ends; ``--plot`` draws a Gantt
chart."""

from __future__ import annotations

import argparse
import sys
import time

from gradientmail.status import format_status, plot_gantt, read_status
from gradientmail.urls import from_url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``status`` options."""
    parser.add_argument("url", help="the run's mailbox URL, e.g. file:///tmp/run1")
    parser.add_argument("--watch", action="store_true", help="redraw until every learner stops")
    parser.add_argument(
        "--interval", type=float, default=2.0, help="seconds between redraws with --watch"
    )
    parser.add_argument("--plot", metavar="PNG", help="also draw a Gantt chart into this file")


def run(args: argparse.Namespace) -> int:
    """Print the status (repeatedly with ``--watch``); 1 if a learner failed, else 0."""
    mailbox = from_url(args.url)
    while True:
        status = read_status(mailbox)
        text = format_status(status)
        if args.watch and sys.stdout.isatty():
            text = "\x1b[2J\x1b[H" + text
        print(text, flush=True)
        if not args.watch or (status.learners and not status.running):
            break
        time.sleep(args.interval)  # a redraw period, not synchronisation
        print()
    if args.plot:
        plot_gantt(status, args.plot)
        print(f"wrote {args.plot}")
    return 1 if status.failed else 0
