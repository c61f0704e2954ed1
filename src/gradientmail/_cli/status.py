"""``gradientmail status URL``: print a run's learners, units and ETA, and its shared models.

Exit status: 0 for a report (and, with ``--watch``, once every unit of the epoch shown and of
the epochs before it is done); 1 when the URL
holds no run, when a learner failed, or, with ``--watch``, when work is left but no learner
is running. ``status`` only reads: it never creates the mailbox's directory or any key.
``--watch`` started before the run's first learner waits for the run to appear (on a
``file://`` URL, for its directory too).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from gradientmail._errors import ConfigurationError
from gradientmail._exchange.report import (
    format_shared_models,
    read_shared_models,
    shared_models_json,
)
from gradientmail._urls import from_url
from gradientmail.backends._options import redact
from gradientmail.status import as_json, format_status, plot_gantt, read_status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``status`` options."""
    parser.add_argument("url", help="the run's mailbox URL, e.g. file:///tmp/run1")
    parser.add_argument(
        "--watch", action="store_true", help="redraw until the run is complete or stalls"
    )
    parser.add_argument(
        "--interval", type=float, default=2.0, help="seconds between redraws with --watch"
    )
    parser.add_argument(
        "--epoch", type=_epoch, default=None, help="the epoch to show, 0 or more (default: newest)"
    )
    parser.add_argument("--plot", metavar="PNG", help="also draw a Gantt chart into this file")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the same facts as one JSON object (schema: gradientmail.status.as_json)",
    )


def _epoch(text: str) -> int:
    """``--epoch``: an int >= 0 (argparse turns the ValueError into a usage error, exit 2)."""
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _local_root(url: str) -> str | None:
    if "://" not in url:
        return url
    if url.startswith("file://"):
        return url[len("file://") :].split("?", 1)[0]
    return None


def run(args: argparse.Namespace) -> int:
    """Print the status (repeatedly with ``--watch``); see the module docstring for exits."""
    if args.plot:
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            raise ConfigurationError(f"--plot: the folder {folder!r} does not exist; create it")
    root = _local_root(args.url)
    waiting = False
    if root is not None and not os.path.isdir(root):
        if not args.watch:
            print(f"no run at {redact(args.url)}: the directory does not exist", file=sys.stderr)
            return 1
        # A watch started before the first learner: wait for the run to appear.
        print(f"no run at {redact(args.url)} yet; waiting for one to start", flush=True)
        waiting = True
        while not os.path.isdir(root):
            time.sleep(args.interval)  # a redraw period, not synchronisation
    mailbox = from_url(args.url)
    while True:
        status = read_status(mailbox, args.epoch)
        heads = read_shared_models(mailbox)
        models = format_shared_models(heads)
        if status.exists and not status.epochs.started:
            print(
                f"epoch {status.epoch} of the run at {mailbox.url} has not started: the newest "
                f"epoch with any claim is {status.epochs.newest}",
                file=sys.stderr,
            )
            return 1
        if not status.exists:
            if models:
                if args.json:  # a mailbox that holds shared models alone
                    record = {"schema": 2, "url": redact(mailbox.url), "now": status.now}
                    record["shared_models"] = shared_models_json(heads)
                    models = json.dumps(record, sort_keys=True)
                print(models, flush=True)
                return 0
            if args.watch:
                # A watch started before the first learner: wait for the run to appear.
                if not waiting:
                    print(f"no run at {mailbox.url} yet; waiting for one to start", flush=True)
                    waiting = True
                time.sleep(args.interval)  # a redraw period, not synchronisation
                continue
            print(f"no run at {mailbox.url}: no manifest, learner or claim", file=sys.stderr)
            return 1
        if args.json:
            record = as_json(status, mailbox.url) | {"shared_models": shared_models_json(heads)}
            text = json.dumps(record, sort_keys=True)
        else:
            text = format_status(status) + (f"\n\n{models}" if models else "")
        if args.watch and sys.stdout.isatty() and not args.json:
            text = "\x1b[2J\x1b[H" + text
        print(text, flush=True)
        if not args.watch or status.run_complete or status.stalled:
            break
        time.sleep(args.interval)  # a redraw period, not synchronisation
        print()
    if args.plot:
        plot_gantt(status, args.plot)
        print(f"wrote {args.plot}")
    if args.watch:
        return 0 if status.run_complete else 1
    return 1 if status.failed else 0
