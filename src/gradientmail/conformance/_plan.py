"""Sizing the single-winner races for a chosen bound, and estimating how long they take.

A run aiming at a bound (``--bound 0.001``, or the default 0.5 % of a full run) needs
:func:`~gradientmail.conformance._power.keys_for_bound` contested keys in all. They are
shared between the race properties that will run on this mailbox, thread racers and
process racers alike; each property races its fixed and drawn races first, then tops up
with batches of :data:`BATCH_KEYS` keys, every key started from a shared start line.

:func:`estimate_seconds` times one small probe race per kind of racer and scales it up,
separating the racing itself from the cost of starting threads or processes.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gradientmail.conformance._context import Property, SuiteOptions
from gradientmail.conformance._power import keys_for_bound, percent
from gradientmail.conformance._races import Mode, race_put_if_absent
from gradientmail.mailbox import Mailbox

__all__ = ["BATCH_KEYS", "PROBE_KEYS", "RacePlan", "estimate_seconds", "plan_races"]

#: Keys per top-up race: each batch starts its racers once, then one start line per key.
BATCH_KEYS = 250

#: Keys in the probe race that :func:`estimate_seconds` times.
PROBE_KEYS = 8

#: The payload of top-up races: small, so that the keys, not the bytes, cost the time.
BATCH_PAYLOAD = 64


@dataclass(frozen=True)
class RacePlan:
    """How many keys each race property must contest for the run to reach ``bound``."""

    bound: float
    #: property name → contested keys it must reach.
    shares: dict[str, int]
    #: property name → its racers ("threads" or "processes") and how many at most.
    racers: dict[str, tuple[Mode, int]] = field(default_factory=dict)
    #: Estimated seconds of racing, if :func:`estimate_seconds` measured it.
    estimate: float | None = None

    @property
    def total(self) -> int:
        """Contested keys in the whole run."""
        return sum(self.shares.values())

    def describe(self) -> str:
        """One line for the report's head: the bound, the planned keys and the estimate."""
        parts = ", ".join(
            f"{self.shares[name]} by up to {count} {mode}"
            for name, (mode, count) in self.racers.items()
        )
        line = (
            f"races sized for a {percent(self.bound)} bound at 95 % confidence: "
            f"{self.total} contested keys ({parts}), in batches of up to {BATCH_KEYS} keys "
            "with a start line per key"
        )
        if self.estimate is not None:
            line += f"; estimated {_duration(self.estimate)} of racing"
        return line


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    return f"{seconds / 60:.1f} min"


def _most(options: SuiteOptions, mode: Mode) -> int:
    return options.threads if mode == "threads" else options.processes


def plan_races(
    box: Mailbox, options: SuiteOptions, properties: Iterable[Property]
) -> RacePlan | None:
    """Share the keys ``options.target_bound`` needs among the race properties that will run.

    A property runs if it is among ``properties``, the mailbox declares what it requires,
    and it has at least two racers. Returns ``None`` when there is no bound to reach or no
    race property will run.
    """
    bound = options.target_bound
    if bound is None:
        return None
    racers = {
        p.name: (p.race_mode, _most(options, p.race_mode))
        for p in properties
        if p.race_mode is not None
        and all(box.supports(cap) for cap in p.requires)
        and _most(options, p.race_mode) >= 2
    }
    if not racers:
        return None
    each, extra = divmod(keys_for_bound(bound), len(racers))
    shares = {name: each + (1 if i < extra else 0) for i, name in enumerate(racers)}
    return RacePlan(bound, shares, racers)


def estimate_seconds(box: Mailbox, plan: RacePlan, options: SuiteOptions) -> RacePlan:
    """``plan`` with an estimate of its racing time, from one probe race per kind of racer.

    Each probe races :data:`PROBE_KEYS` keys under a fresh prefix of ``box`` and deletes
    them. The estimate is, per property, the probe's start-up cost per batch plus its time
    per key, times the keys planned: the fixed races with large values take a little more.
    """
    seconds = 0.0
    for name, (mode, count) in plan.racers.items():
        prefix = f"probe-{uuid.uuid4().hex[:8]}"
        report = race_put_if_absent(
            box,
            racers=count,
            keys=PROBE_KEYS,
            mode=mode,
            payload_size=BATCH_PAYLOAD,
            prefix=prefix,
            timeout=options.timeout,
        )
        for key in report.keys:
            box.delete(key)
        per_key = report.racing_seconds / PROBE_KEYS
        start_up = max(report.elapsed - report.racing_seconds, 0.0)
        share = plan.shares[name]
        seconds += math.ceil(share / BATCH_KEYS) * start_up + share * per_key
    return replace(plan, estimate=seconds)
