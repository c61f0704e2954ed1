"""Telemetry shared by the patterns: counter dataclasses and latency summaries.

* :class:`Stats`: a dataclass base whose fields all have defaults, with :meth:`Stats.snapshot`
  and :meth:`Stats.as_dict`.
* :class:`Latencies`: count, total, maximum and percentiles of a duration, from a bounded
  reservoir sample.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar

__all__ = ["Latencies", "Stats"]

_S = TypeVar("_S", bound="Stats")


@dataclass
class Stats:
    """Base for a pattern's counters: a dataclass whose fields all have defaults.

    Counters are written by the thread that owns each of them (a consumer writes its wait
    time, a loader its claims), so reading them from another thread gives a consistent-enough
    view without locks. :meth:`snapshot` copies them for reporting.
    """

    def snapshot(self: _S) -> _S:
        """A copy of the current values (``Latencies`` and nested ``Stats`` fields are
        copied, not shared)."""
        copied = {
            f.name: value.snapshot() if isinstance(value, Stats) else value.copy()
            for f in fields(self)
            if isinstance(value := getattr(self, f.name), (Latencies, Stats))
        }
        return replace(self, **copied)

    def as_dict(self) -> dict[str, Any]:
        """The values as plain JSON-friendly data (``Latencies`` as their summary, nested
        ``Stats`` as dicts of their own)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (Latencies, Stats)):
                value = value.summary() if isinstance(value, Latencies) else value.as_dict()
            out[f.name] = value
        return out


class Latencies:
    """A duration's count, total, maximum, and percentiles from a bounded sample.

    ``add`` is cheap (no lock; one writer thread). At most ``keep`` samples are retained,
    chosen by reservoir sampling, so percentiles stay representative over long runs.
    """

    __slots__ = ("_rng", "count", "keep", "max", "samples", "total")

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.samples: list[float] = []
        self._rng = random.Random(0)

    def add(self, seconds: float) -> None:
        """Record one duration in seconds."""
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds
        if len(self.samples) < self.keep:
            self.samples.append(seconds)
        else:
            slot = self._rng.randrange(self.count)
            if slot < self.keep:
                self.samples[slot] = seconds

    @property
    def mean(self) -> float:
        """Mean seconds (0.0 when empty)."""
        return self.total / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100) of the retained samples, 0.0 when empty."""
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        index = min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))
        return ordered[index]

    def copy(self) -> Latencies:
        """An independent copy."""
        other = Latencies(self.keep)
        other.count, other.total, other.max = self.count, self.total, self.max
        other.samples = list(self.samples)
        return other

    def summary(self) -> dict[str, float]:
        """``count``, ``mean``, ``p50``, ``p99`` and ``max`` (seconds)."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "max": self.max,
        }

    def __repr__(self) -> str:
        return f"Latencies(count={self.count}, mean={self.mean:.6f}s, max={self.max:.6f}s)"
