"""``gradientmail conformance URL``: is this store safe to coordinate on?

Runs the properties of :mod:`gradientmail.conformance._properties` against the store at
``URL``, inside a fresh prefix ``URL/conformance-<time>-<random>`` that no one else uses,
and deletes every key it wrote when done (also on Ctrl-C). First a preflight (one write,
read, list and delete, at most 10 s): a store that cannot be tested is reported once, with
the cause and the fix. Then one line per property (PASS, FAIL, SKIP or INCONCLUSIVE, with
the summary, counterexample or reason) and a one-line verdict last.

Exit status: 0 PASS (every property that applies held), 1 FAIL (a property was violated or
broke the store), 3 INCONCLUSIVE (something could not be tested: a missing extra,
credentials, bucket or endpoint, or a store that stopped answering; nothing failed), 2 a
bad URL or option.

Options can go in the URL's query string, e.g.
``gradientmail conformance 's3://bucket/tmp?endpoint_url=http://127.0.0.1:8333'``.
"""

from __future__ import annotations

import argparse

from gradientmail._errors import MissingDependencyError
from gradientmail._urls import redact
from gradientmail.conformance._preflight import diagnose
from gradientmail.conformance._properties import (
    GROUPS,
    PROPERTIES,
    SuiteOptions,
    select_properties,
)
from gradientmail.conformance._runner import check_store, not_tested, resolve_seed
from gradientmail.conformance._workspace import Workspace, below

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


#: What ``--help`` says after the options: the verdicts and their exit statuses.
EPILOG = (
    "verdicts and exit status: 0 PASS (every property that applies held); 1 FAIL (a property "
    "was violated or broke the store; 'NOT safe to coordinate on' only when an atomicity "
    "property was seen failing); 3 INCONCLUSIVE (could not test: missing extra, credentials, "
    "bucket or endpoint, or the store stopped answering); 2 bad URL or option"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``conformance`` options."""
    parser.epilog = EPILOG
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
        "--preflight-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long the first put, get, list and delete may take before the store is "
        "reported as not answering (default 10)",
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
        help="comma-separated properties or groups to run (default all). Groups: "
        + ", ".join(GROUPS)
        + ". Properties: "
        + ", ".join(p.name for p in PROPERTIES),
    )


#: Options that are :class:`SuiteOptions` fields of the same name, passed on unchanged.
_PASSED_ON = ("threads", "processes", "seed", "quick", "race_keys", "bound", "preflight_timeout")


def run(args: argparse.Namespace) -> int:
    """Run the suite and print the report; the exit status is the verdict's."""
    properties = select_properties(args.only)
    options = resolve_seed(SuiteOptions(**{name: getattr(args, name) for name in _PASSED_ON}))

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        workspace = Workspace.open(args.url)
    except MissingDependencyError as exc:
        untested = not_tested(redact(args.url), options, diagnose(exc, "opening the store"))
        for line in untested.lines():
            say(line)
        return untested.exit_status
    mode = "quick" if options.quick else "full"
    say(
        f"gradientmail conformance {workspace.box.url} ({mode} run, seed {options.seed}, "
        f"up to {options.threads} threads and {options.processes} processes per race)"
    )
    report = None
    try:
        report = check_store(
            workspace.box, options, properties, say=say, estimate=args.bound is not None
        )
    finally:
        warning = workspace.close(report)
        if warning is not None:
            say(warning)
    say(report.verdict())
    return report.exit_status
