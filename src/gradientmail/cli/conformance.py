"""``gradientmail conformance URL``: is this store safe to coordinate on?

Runs every property of :mod:`gradientmail.conformance.properties` against the store at
``URL``, inside a fresh prefix ``URL/conformance-<time>-<random>`` that no one else uses,
and deletes every key it wrote when done (also on Ctrl-C). Prints one line per property,
``PASS`` / ``FAIL`` / ``SKIP`` with the summary, counterexample or reason, and a one-line
verdict last. Exit status: 0 when nothing failed, 1 when a property failed, 2 for a bad URL
or options.

Options can go in the URL's query string, e.g.
``gradientmail conformance 's3://bucket/tmp?endpoint_url=http://127.0.0.1:8333'``.
"""

from __future__ import annotations

import argparse
import sys

from gradientmail.conformance.plan import estimate_seconds, plan_races
from gradientmail.conformance.properties import PROPERTIES, SuiteOptions, select_properties
from gradientmail.conformance.runner import Result, resolve_seed, run_suite
from gradientmail.conformance.workspace import below, fresh_segment, remove_workspace
from gradientmail.urls import from_url

__all__ = ["add_arguments", "below", "run"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(
            f"must be a fraction strictly between 0 and 1 (0.001 is 0.1 %), got {text}"
        )
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``conformance`` options."""
    parser.add_argument(
        "url", help="the store to check, e.g. s3://bucket/tmp?endpoint_url=http://127.0.0.1:9000"
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer examples and keys: a smoke test (still races)"
    )
    parser.add_argument(
        "--threads", type=_positive, default=16, help="most racing threads per race (default 16)"
    )
    parser.add_argument(
        "--processes",
        type=_positive,
        default=4,
        help="most racing processes per race, each with its own client (default 4)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="replay a run: the seed its report printed"
    )
    parser.add_argument(
        "--race-keys",
        type=_positive,
        default=None,
        help="keys in the strongest race (default 40, 15 with --quick); lower it for slow stores",
    )
    parser.add_argument(
        "--bound",
        type=_fraction,
        default=None,
        metavar="RATE",
        help="size the single-winner races so that a clean run rules out a double-win rate "
        "above RATE at 95%% confidence, e.g. 0.001 for 0.1%% (2995 contested keys); prints "
        "the plan and an estimated time first (default 0.005 for a full run; --quick: the "
        "fixed races only)",
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="NAMES",
        help="comma-separated properties to run (default all): "
        + ", ".join(p.name for p in PROPERTIES),
    )


def run(args: argparse.Namespace) -> int:
    """Run the suite and print the report; 0 if nothing failed, 1 if something did."""
    properties = select_properties(args.only)
    options = resolve_seed(
        SuiteOptions(
            threads=args.threads,
            processes=args.processes,
            seed=args.seed,
            quick=args.quick,
            race_keys=args.race_keys,
            bound=args.bound,
        )
    )
    segment = fresh_segment()
    box = from_url(below(args.url, segment))

    def say(line: str) -> None:
        print(line, flush=True)

    def show(result: Result) -> None:
        for line in result.lines():
            say(line)

    mode = "quick" if options.quick else "full"
    say(
        f"gradientmail conformance {box.url} ({mode} run, seed {options.seed}, "
        f"up to {options.threads} threads and {options.processes} processes per race)"
    )
    try:
        plan = plan_races(box, options, properties)
        if plan is not None:
            if args.bound is not None:
                plan = estimate_seconds(box, plan, options)
            say(plan.describe())
        report = run_suite(box, options, properties=properties, on_result=show, plan=plan)
    finally:
        warning = remove_workspace(box, segment)
        if warning is not None:
            say(warning)
    say(report.verdict())
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m gradientmail.cli.conformance``."""
    parser = argparse.ArgumentParser(prog="gradientmail conformance", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
