"""Running properties and reporting them: the engine behind both front ends.

:func:`run_property` runs one :class:`~gradientmail.conformance.context.Property` against
a mailbox in a fresh key namespace, turns its outcome into a :class:`Result` (PASS, FAIL
with a counterexample, or SKIP with the reason) and deletes every key it wrote.
:func:`run_suite` runs them all and returns a :class:`SuiteReport` whose :meth:`lines
<SuiteReport.lines>` are the CLI's report.
"""

from __future__ import annotations

import enum
import secrets
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from gradientmail.conformance.context import (
    Context,
    Property,
    PropertyFailed,
    PropertySkipped,
    SuiteOptions,
)
from gradientmail.conformance.plan import RacePlan, plan_races
from gradientmail.conformance.power import double_win_bound, keys_for_bound, percent
from gradientmail.conformance.properties import PROPERTIES
from gradientmail.errors import GradientMailError
from gradientmail.mailbox import Capability, Mailbox

__all__ = [
    "Outcome",
    "Result",
    "SuiteReport",
    "delete_all",
    "resolve_seed",
    "run_property",
    "run_suite",
]


class Outcome(enum.Enum):
    """What a property's run concluded."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Result:
    """One property's outcome: the summary (PASS), counterexample (FAIL) or reason (SKIP)."""

    prop: Property
    outcome: Outcome
    detail: str
    seconds: float
    #: Keys its single-winner races contested cleanly (0 for other properties).
    contested: int = 0

    @property
    def bound(self) -> float | None:
        """The double-win rate its clean races rule out at 95 % confidence, if it raced."""
        if self.outcome is not Outcome.PASS or not self.contested:
            return None
        return double_win_bound(self.contested)

    def lines(self, width: int = 22) -> list[str]:
        """The report lines: ``OUTCOME  name  (time)  detail``; extra detail lines indented."""
        first, *rest = self.detail.splitlines() or [""]
        head = f"{self.outcome.value}  {self.prop.name:<{width}} {self.seconds:5.1f}s  {first}"
        return [head, *(f"{'':>{width + 14}}{line}" for line in rest)]


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


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MEANING = {
    Capability.ATOMIC_CREATE: "put_if_absent is not claimed atomic",
    Capability.COMPARE_AND_SWAP: "no compare-and-swap",
    Capability.SHARED_ACROSS_PROCESSES: "other processes do not see its keys",
}


def _missing_capabilities(prop: Property, box: Mailbox) -> str | None:
    missing = [cap for cap in prop.requires if not box.supports(cap)]
    if not missing:
        return None
    names = ", ".join(f"Capability.{cap.name} ({_MEANING[cap]})" for cap in missing)
    return f"the mailbox does not declare {names}; not checked, and not to be relied on"


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
            :class:`~gradientmail.conformance.plan.RacePlan`). Default: all the keys
            ``options.target_bound`` needs, as when the property runs alone.

    Returns:
        PASS with a summary, FAIL with a counterexample (any exception from the store counts
        as a failure, shown with its type), or SKIP with the reason.
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
    try:
        outcome, detail = Outcome.PASS, prop.check(ctx)
    except PropertySkipped as exc:
        outcome, detail = Outcome.SKIP, str(exc)
    except PropertyFailed as exc:
        outcome, detail = Outcome.FAIL, str(exc)
    except GradientMailError as exc:
        outcome, detail = Outcome.FAIL, _shorten(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug in a store's client is a failure too
        where = traceback.extract_tb(exc.__traceback__)[-1]
        outcome = Outcome.FAIL
        detail = _shorten(f"unexpected {type(exc).__name__}: {exc}")
        detail += f" (at {where.filename}:{where.lineno})"
    try:
        delete_all(box, ns + "/")
    except GradientMailError as exc:
        detail += f"\ncould not delete this property's keys under {ns}/: {exc}"
    return Result(prop, outcome, detail, time.perf_counter() - started, ctx.contested)


@dataclass
class SuiteReport:
    """Every property's result, and the verdict."""

    url: str
    options: SuiteOptions
    results: list[Result] = field(default_factory=list)
    #: How the races were sized, if the run aimed at a bound.
    plan: RacePlan | None = None

    @property
    def contested(self) -> int:
        """Keys contested by the single-winner races that passed."""
        return sum(r.contested for r in self.by_outcome(Outcome.PASS) if r.prop.race_mode)

    def power(self) -> str:
        """What the clean races rule out, for the verdict; empty if no race passed."""
        if not self.contested:
            return ""
        bound = percent(double_win_bound(self.contested))
        return (
            f" Races: 0 double winners in {self.contested} contested keys, so a store that "
            f"lets two claimants win on more than {bound} of contested keys would have "
            "failed with 95 % confidence."
        )

    def by_outcome(self, outcome: Outcome) -> list[Result]:
        """The results with ``outcome``, in report order."""
        return [r for r in self.results if r.outcome is outcome]

    @property
    def ok(self) -> bool:
        """No property failed."""
        return not self.by_outcome(Outcome.FAIL)

    def result(self, name: str) -> Result:
        """The result of the property called ``name``."""
        for result in self.results:
            if result.prop.name == name:
                return result
        raise KeyError(name)

    def verdict(self) -> str:
        """The one-line verdict that ends the report."""
        failed = self.by_outcome(Outcome.FAIL)
        skipped = self.by_outcome(Outcome.SKIP)
        total = len(self.results)
        skip_note = (
            f"; {len(skipped)} skipped ({', '.join(r.prop.name for r in skipped)})"
            if skipped
            else ""
        )
        if failed:
            names = ", ".join(r.prop.name for r in failed)
            if any(r.prop.atomicity for r in failed):
                meaning = "NOT safe to coordinate on: two claimants can both win"
            elif any(r.prop.atomicity for r in skipped):
                meaning = (
                    "Keys or listings differ from the contract, and atomicity was only "
                    "partly checked (see the skipped properties)"
                )
            else:
                meaning = (
                    "Claims were atomic in every race, but keys or listings differ from the "
                    "contract, so code may not move here unchanged"
                )
            return (
                f"verdict: FAIL: {len(failed)} of {total} properties failed ({names}){skip_note}. "
                f"{meaning}.{self.power()} Replay with --seed {self.options.seed}"
            )
        return (
            f"verdict: PASS: {total - len(skipped)} of {total} properties hold{skip_note}."
            f"{self.power()} Seed {self.options.seed}"
        )

    def lines(self) -> list[str]:
        """Every result's lines, then the verdict."""
        out: list[str] = []
        for result in self.results:
            out.extend(result.lines())
        out.append(self.verdict())
        return out


def run_suite(
    box: Mailbox,
    options: SuiteOptions | None = None,
    *,
    properties: Iterable[Property] = PROPERTIES,
    on_result: Callable[[Result], None] | None = None,
    plan: RacePlan | None = None,
) -> SuiteReport:
    """Run ``properties`` (default: all) against ``box`` in order.

    Args:
        box: a mailbox; each property works in its own namespace and deletes its keys.
        options: how hard to push; a ``None`` seed becomes a random one, reported.
        properties: which properties to run.
        on_result: called with each result as soon as it is known (the CLI prints it).
        plan: how many keys each race property contests; default
            :func:`~gradientmail.conformance.plan.plan_races` for ``options.target_bound``.
    """
    options = resolve_seed(options or SuiteOptions())
    properties = list(properties)
    plan = plan or plan_races(box, options, properties)
    report = SuiteReport(box.url, options, plan=plan)
    for prop in properties:
        share = plan.shares.get(prop.name) if plan is not None else None
        result = run_property(prop, box, options, contested_target=share)
        report.results.append(result)
        if on_result is not None:
            on_result(result)
    return report
