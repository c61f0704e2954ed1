"""Running properties: the engine behind both front ends.

:func:`run_property` runs one :class:`~gradientmail.conformance._context.Property` against a
mailbox in a fresh key namespace, turns its outcome into a
:class:`~gradientmail.conformance._report.Result` and deletes every key it wrote.
:func:`run_suite` runs them in order and stops testing a store that stopped answering:
the property that broke it FAILs with the cause, the rest are INCONCLUSIVE.
:func:`check_store` is what ``gradientmail conformance`` runs: a preflight first, then the
plan of the races, then the suite, each step reported as it happens.
"""

from __future__ import annotations

import importlib.util
import secrets
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from gradientmail._errors import BackendError, GradientMailError, MissingDependencyError
from gradientmail.conformance._context import (
    Context,
    Property,
    PropertyErrored,
    PropertyFailed,
    PropertySkipped,
    SuiteOptions,
)
from gradientmail.conformance._main_guard import unguarded_main_call
from gradientmail.conformance._plan import RacePlan, estimate_seconds, plan_races
from gradientmail.conformance._power import keys_for_bound
from gradientmail.conformance._preflight import Problem, preflight
from gradientmail.conformance._properties import PROPERTIES
from gradientmail.conformance._report import Outcome, Result, SuiteReport
from gradientmail.mailbox import Capability, Mailbox

__all__ = [
    "check_store",
    "delete_all",
    "missing_modules",
    "not_tested",
    "resolve_seed",
    "run_property",
    "run_suite",
]


def resolve_seed(options: SuiteOptions) -> SuiteOptions:
    """``options`` with a concrete seed: the given one, or a fresh random one."""
    if options.seed is not None:
        return options
    return replace(options, seed=secrets.randbelow(2**32))


def delete_all(box: Mailbox, prefix: str = "") -> int:
    """Delete every key under ``prefix`` (eight deletes in flight); return how many."""
    keys = list(box.list(prefix))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(box.delete, keys))
    return len(keys)


def missing_modules(properties: Iterable[Property]) -> tuple[str, ...]:
    """The modules ``properties`` need (:attr:`Property.needs`) that cannot be imported."""
    needed = sorted({m for p in properties for m in p.needs})
    return tuple(m for m in needed if importlib.util.find_spec(m) is None)


_CLEANUP_FAILED = "could not delete this property's keys"


def _runnable(properties: list[Property], missing: tuple[str, ...]) -> list[Property]:
    return [p for p in properties if not set(p.needs) & set(missing)]


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MEANING = {
    Capability.ATOMIC_CREATE: "put_if_absent is not claimed atomic",
    Capability.COMPARE_AND_SWAP: "no compare-and-swap",
    Capability.SHARED_ACROSS_PROCESSES: "other processes do not see its keys",
    Capability.LIST_START_AFTER: "a partial listing is a filtered full listing",
}


def _missing_capabilities(prop: Property, box: Mailbox) -> str | None:
    missing = [cap for cap in prop.requires if not box.supports(cap)]
    if not missing:
        return None
    names = ", ".join(f"Capability.{cap.name} ({_MEANING[cap]})" for cap in missing)
    return f"the mailbox does not declare {names}; not checked, and not to be relied on"


def _store_error_caused(exc: BaseException) -> bool:
    """Whether ``exc`` was raised because the store failed (it, or what it wraps)."""
    return isinstance(exc, BackendError) or isinstance(exc.__cause__, BackendError)


def _conclude(prop: Property, ctx: Context) -> tuple[Outcome, str, bool]:
    """Run the check; return (outcome, detail, whether a FAIL was seen, not an error)."""
    try:
        return Outcome.PASS, prop.check(ctx), False
    except PropertySkipped as exc:
        return Outcome.SKIP, str(exc), False
    except MissingDependencyError as exc:
        return Outcome.INCONCLUSIVE, f"not run: {exc}", False
    except PropertyFailed as exc:
        return Outcome.FAIL, str(exc), not _store_error_caused(exc)
    except PropertyErrored as exc:
        return Outcome.FAIL, str(exc), False
    except GradientMailError as exc:
        return Outcome.FAIL, _shorten(f"{type(exc).__name__}: {exc}"), False
    except Exception as exc:  # noqa: BLE001 - a bug in a store's client is a failure too
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = _shorten(f"unexpected {type(exc).__name__}: {exc}")
        return Outcome.FAIL, f"{detail} (at {where.filename}:{where.lineno})", False


def run_property(
    prop: Property,
    box: Mailbox,
    options: SuiteOptions,
    *,
    namespace: str | None = None,
    contested_target: int | None = None,
) -> Result:
    """Run one property against ``box`` and delete what it wrote.

    Args:
        prop: the property.
        box: the mailbox; the property's keys live under ``namespace + "/"``.
        options: how hard to push; a ``None`` seed is replaced by a random one.
        namespace: the key namespace (default: the property's name and a random suffix).
        contested_target: keys a race property must contest (its share of a
            :class:`~gradientmail.conformance._plan.RacePlan`). Default: all the keys
            ``options.target_bound`` needs, as when the property runs alone.

    Returns:
        PASS with a summary; FAIL with a counterexample (``observed``) or the store's error
        (any exception counts, shown with its type); SKIP with the reason; INCONCLUSIVE when
        a module it needs is missing.
    """
    options = resolve_seed(options)
    assert options.seed is not None
    started = time.perf_counter()
    reason = _missing_capabilities(prop, box)
    if reason is not None:
        return Result(prop, Outcome.SKIP, reason, 0.0)
    ns = namespace or f"{prop.name}-{uuid.uuid4().hex[:6]}"
    bound = options.target_bound
    if contested_target is None and prop.race_mode is not None and bound is not None:
        contested_target = keys_for_bound(bound)
    ctx = Context(box, ns, options, options.seed, contested_target=contested_target)
    outcome, detail, observed = _conclude(prop, ctx)
    try:
        delete_all(box, ns + "/")
    except GradientMailError as exc:
        detail += f"\n{_CLEANUP_FAILED} under {ns}/: {exc}"
    seconds = time.perf_counter() - started
    return Result(prop, outcome, detail, seconds, ctx.contested, observed)


def run_suite(
    box: Mailbox,
    options: SuiteOptions | None = None,
    *,
    properties: Iterable[Property] = PROPERTIES,
    on_result: Callable[[Result], None] | None = None,
    plan: RacePlan | None = None,
) -> SuiteReport:
    """Run ``properties`` (default: all) against ``box`` in order.

    A property that needs a module that is not installed is INCONCLUSIVE, not run. After
    a property fails with a store error (not a counterexample), a preflight checks that
    the store still answers; if it does not, that property keeps its FAIL, with the cause,
    and every later property is INCONCLUSIVE without running (:attr:`SuiteReport.stopped`).

    Args:
        box: a mailbox; each property works in its own namespace and deletes its keys.
        options: how hard to push; a ``None`` seed becomes a random one, reported.
        properties: which properties to run.
        on_result: called with each result as soon as it is known (the CLI prints it).
        plan: how many keys each race property contests; default
            :func:`~gradientmail.conformance._plan.plan_races` for ``options.target_bound``.
    """
    options = resolve_seed(options or SuiteOptions())
    properties = list(properties)
    missing = missing_modules(properties)
    plan = plan or plan_races(box, options, _runnable(properties, missing))
    report = SuiteReport(box.url, options, plan=plan, missing=missing)
    report.unguarded = unguarded_main_call()
    for prop in properties:
        result = _next_result(report, prop, box, options)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    return report


def _next_result(
    report: SuiteReport, prop: Property, box: Mailbox, options: SuiteOptions
) -> Result:
    undeclared = _missing_capabilities(prop, box)
    if undeclared is not None:
        return Result(prop, Outcome.SKIP, undeclared, 0.0)
    if report.stopped is not None:
        why = f"not run: the store stopped answering during {report.stopped[0]}"
        return Result(prop, Outcome.INCONCLUSIVE, why, 0.0)
    if Capability.SHARED_ACROSS_PROCESSES in prop.requires and report.unguarded:
        why = (
            f"not run: the suite was started at the top level of {report.unguarded}, outside "
            'if __name__ == "__main__":, so each racer process (multiprocessing spawns them, '
            "importing the script again) would run the suite again instead of racing; put "
            'the call under if __name__ == "__main__": and run the script again'
        )
        return Result(prop, Outcome.INCONCLUSIVE, why, 0.0)
    absent = [m for m in prop.needs if m in report.missing]
    if absent:
        why = f"not run: needs {', '.join(absent)}, from the conformance extra (see the note)"
        return Result(prop, Outcome.INCONCLUSIVE, why, 0.0)
    share = report.plan.shares.get(prop.name) if report.plan is not None else None
    result = run_property(prop, box, options, contested_target=share)
    if result.outcome is Outcome.FAIL and not result.observed:
        problem = preflight(box, options.preflight_timeout)
        if problem is not None:
            report.stopped = (prop.name, problem)
            # Its keys could not be deleted either: say so once, not with the error again.
            kept = [x for x in result.detail.splitlines() if not x.startswith(_CLEANUP_FAILED)]
            after = f"then the store stopped answering ({problem.summary}; its keys may remain)"
            result = replace(result, detail="\n".join([*kept, after]))
    return result


def not_tested(url: str, options: SuiteOptions, problem: Problem) -> SuiteReport:
    """The report of a run that could not test the store at all, stated once.

    INCONCLUSIVE, unless the store broke its backend's protocol (:attr:`Problem.violation`):
    then FAIL.
    """
    kind = "FAIL" if problem.violation else "INCONCLUSIVE"
    line = f"{kind}  cannot test {url}: {problem}"
    return SuiteReport(url, options, problem=problem, notes=[line])


def check_store(
    box: Mailbox,
    options: SuiteOptions,
    properties: Iterable[Property] = PROPERTIES,
    *,
    say: Callable[[str], None],
    estimate: bool = False,
) -> SuiteReport:
    """Preflight, plan, then the suite: what ``gradientmail conformance`` runs.

    Each step is reported through ``say`` as it happens: a store that cannot be tested
    (:func:`~gradientmail.conformance._preflight.preflight`) is reported once, and nothing
    runs; a missing extra is stated once; the race plan (with an estimate of its time when
    ``estimate``) comes before the first property; then each result. The verdict is left to
    the caller (``report.verdict()``), which may clean up first.
    """
    options = resolve_seed(options)
    properties = list(properties)
    problem = preflight(box, options.preflight_timeout)
    if problem is not None:
        report = not_tested(box.url, options, problem)
        for line in report.notes:
            say(line)
        return report
    missing = missing_modules(properties)
    notes = []
    if missing:
        needing = [p.name for p in properties if set(p.needs) & set(missing)]
        notes.append(
            f"note: {', '.join(missing)} (the conformance extra) is not installed, so "
            f"{', '.join(needing)} cannot run and will be INCONCLUSIVE. "
            "Fix: pip install 'gradientmail[conformance]'"
        )
    plan = plan_races(box, options, _runnable(properties, missing))
    if plan is not None and estimate and unguarded_main_call() is None:
        plan = estimate_seconds(box, plan, options)
    for line in notes + ([plan.describe()] if plan is not None else []):
        say(line)

    def show(result: Result) -> None:
        for line in result.lines():
            say(line)

    report = run_suite(box, options, properties=properties, on_result=show, plan=plan)
    report.notes = notes
    return report
