"""What each property concluded, and the verdict of the whole run.

Every property ends PASS, FAIL (with a counterexample or the store's error), SKIP (the
mailbox does not declare what it needs) or INCONCLUSIVE (it could not be tested). The run
ends with one of three verdicts, each with its own exit status of
``gradientmail conformance``:

=================  ====  ==================================================================
PASS               0     every property that applies held
FAIL               1     a property was violated, or broke the store, or the store answered
                         outside its backend's protocol (no GCS generation); the report
                         names it.
                         "NOT safe to coordinate on" only when an atomicity property was
                         *seen* failing (a precondition ignored, two winners, lost updates)
INCONCLUSIVE       3     nothing failed, but something could not be tested: a missing
                         extra, credentials, bucket or endpoint, a store that stopped
                         answering, or every selected property skipped (no property
                         held). Says nothing about safety
(bad usage)        2     a bad URL or option, before anything ran
=================  ====  ==================================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gradientmail.conformance._context import Property, SuiteOptions
from gradientmail.conformance._plan import RacePlan
from gradientmail.conformance._power import double_win_bound, percent
from gradientmail.conformance._preflight import Problem

__all__ = ["EXIT_STATUS", "USAGE_EXIT_STATUS", "Outcome", "Result", "SuiteReport", "Verdict"]


class Outcome(enum.Enum):
    """What a property's run concluded."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    INCONCLUSIVE = "INCONCLUSIVE"


class Verdict(enum.Enum):
    """What the whole run concluded."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


#: The exit status of ``gradientmail conformance`` for each verdict.
EXIT_STATUS = {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.INCONCLUSIVE: 3}
#: The exit status for a bad URL or option: nothing ran.
USAGE_EXIT_STATUS = 2


@dataclass(frozen=True)
class Result:
    """One property's outcome: its summary, counterexample, error, or the reason."""

    prop: Property
    outcome: Outcome
    detail: str
    seconds: float
    #: Keys its single-winner races contested cleanly (0 for other properties).
    contested: int = 0
    #: FAIL only: the store was *seen* breaking the property (a counterexample), rather
    #: than failing with an error while it ran.
    observed: bool = False

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


def _names(results: list[Result]) -> str:
    return ", ".join(r.prop.name for r in results)


@dataclass
class SuiteReport:
    """Every property's result, what stopped the run if anything did, and the verdict."""

    url: str
    options: SuiteOptions
    results: list[Result] = field(default_factory=list)
    #: How the races were sized, if the run aimed at a bound.
    plan: RacePlan | None = None
    #: Why nothing could be tested (the preflight failed); ``results`` is then empty.
    problem: Problem | None = None
    #: Modules of the ``conformance`` extra that are not installed.
    missing: tuple[str, ...] = ()
    #: Causes stated once, before the results (a missing extra, say), not per property.
    notes: list[str] = field(default_factory=list)
    #: The property during which the store stopped answering, and why.
    stopped: tuple[str, Problem] | None = None
    #: ``script.py:LINE`` when a script started the suite unguarded by ``__main__``.
    unguarded: str | None = None

    def by_outcome(self, outcome: Outcome) -> list[Result]:
        """The results with ``outcome``, in report order."""
        return [r for r in self.results if r.outcome is outcome]

    @property
    def ok(self) -> bool:
        """The verdict is PASS."""
        return self.verdict_kind is Verdict.PASS

    def result(self, name: str) -> Result:
        """The result of the property called ``name``."""
        for result in self.results:
            if result.prop.name == name:
                return result
        raise KeyError(name)

    @property
    def verdict_kind(self) -> Verdict:
        """FAIL if any property failed; else INCONCLUSIVE if any could not be tested."""
        if self.by_outcome(Outcome.FAIL) or (self.problem is not None and self.problem.violation):
            return Verdict.FAIL
        if self.problem is not None or self.by_outcome(Outcome.INCONCLUSIVE):
            return Verdict.INCONCLUSIVE
        if not self.by_outcome(Outcome.PASS):
            # Every selected property was skipped: nothing was tested, so nothing passed.
            return Verdict.INCONCLUSIVE
        return Verdict.PASS

    @property
    def exit_status(self) -> int:
        """``gradientmail conformance``'s exit status for this report (:data:`EXIT_STATUS`)."""
        return EXIT_STATUS[self.verdict_kind]

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

    def rerun_hint(self) -> str:
        """How to run the properties that could not be tested, once the cause is fixed."""
        untested = self.by_outcome(Outcome.INCONCLUSIVE)
        if not untested:
            return ""
        hint = f"rerun them with --only {','.join(r.prop.name for r in untested)}"
        if any(r.prop.atomicity for r in untested):
            hint += " (or --only atomicity for the claims alone)"
        return hint

    def _fail_meaning(self, failed: list[Result]) -> str:
        if any(r.prop.atomicity and r.observed for r in failed):
            return "NOT safe to coordinate on: two claimants can both win"
        if self.stopped is not None:
            name, problem = self.stopped
            untested = len(self.by_outcome(Outcome.INCONCLUSIVE))
            return (
                f"The store stopped answering during {name} ({problem.summary}: "
                f"{problem.cause}), so {untested} properties after it are INCONCLUSIVE: no "
                f"atomicity failure was seen. Fix: {problem.fix}; then {self.rerun_hint()}"
            )
        unchecked = [
            r
            for r in self.results
            if r.prop.atomicity and r.outcome is not Outcome.PASS and not r.observed
        ]
        if unchecked:
            return (
                "Keys, listings or single operations differ from the contract, and atomicity "
                f"was only partly checked ({_names(unchecked)} did not pass for other reasons)"
            )
        if not any(r.prop.atomicity for r in self.results):
            return "Keys, listings or single operations differ from the contract"
        return (
            "Claims were atomic in every race, but keys, listings or single operations differ "
            "from the contract, so code may not move here unchanged"
        )

    def verdict(self) -> str:
        """The one-line verdict that ends the report."""
        seed = self.options.seed
        if self.problem is not None and self.problem.violation:
            return (
                f"verdict: FAIL: {self.problem.summary} (see above), so no property could "
                "run. NOT safe to coordinate on through this backend: claims and "
                "compare-and-swap depend on what the store left out."
            )
        if self.problem is not None:
            return (
                f"verdict: INCONCLUSIVE: nothing was tested, because {self.problem.summary} "
                "(see above). This says nothing about whether the store is safe to coordinate on."
            )
        failed = self.by_outcome(Outcome.FAIL)
        skipped = self.by_outcome(Outcome.SKIP)
        untested = self.by_outcome(Outcome.INCONCLUSIVE)
        total = len(self.results)
        notes = "".join(
            f"; {len(group)} {label} ({_names(group)})"
            for group, label in ((skipped, "skipped"), (untested, "inconclusive"))
            if group
        )
        if failed:
            return (
                f"verdict: FAIL: {len(failed)} of {total} properties failed ({_names(failed)})"
                f"{notes}. {self._fail_meaning(failed)}.{self.power()} Replay with --seed {seed}"
            )
        held = total - len(skipped) - len(untested)
        if untested:
            cause = (
                "the conformance extra is not installed (pip install 'gradientmail[conformance]')"
                if self.missing
                else untested[0].detail.splitlines()[0]
            )
            return (
                f"verdict: INCONCLUSIVE: {held} of {total} properties hold{notes}: {cause}. "
                f"Nothing failed, and nothing here says the store is unsafe; "
                f"{self.rerun_hint()}.{self.power()} Seed {seed}"
            )
        if not held:
            return (
                f"verdict: INCONCLUSIVE: no property was tested: {total} selected, {notes[2:]}. "
                "A run in which nothing held says nothing about the store; select properties "
                "this mailbox declares what they need for (see each SKIP line), or run "
                f"without --only. Seed {seed}"
            )
        return f"verdict: PASS: {held} of {total} properties hold{notes}.{self.power()} Seed {seed}"

    def lines(self) -> list[str]:
        """The notes stated once, every result's lines, then the verdict."""
        out: list[str] = []
        out.extend(self.notes)
        for result in self.results:
            out.extend(result.lines())
        out.append(self.verdict())
        return out
