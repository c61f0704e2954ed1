"""``gradientmail status URL``: a run's learners, units left and ETA, read from its mailbox.

Works during a run and after it: it only reads. ``--watch`` redraws the table every
``--interval`` seconds until every learner has stopped; ``--plot run.png`` also draws a
Gantt chart (needs matplotlib: ``pip install 'gradientmail[plot]'``). The exit status is 0,
or 1 when a learner recorded a failure.

Run layout (the keys a run's mailbox holds)
    ``manifest``
        ``{"units": total, "created_at": unix seconds}``, created with ``put_if_absent`` by
        the first ``shared_queue`` to start. Without it the total is unknown and status shows
        no ETA.
    ``units/{identifier}``
        One claim per unit taken, ``{"owner": learner id, "token": ..., "claimed_at": ...}``
        (see :func:`gradientmail.patterns.common.claim`). Status counts these keys.
    ``learners/{learner_id}``
        A :class:`~gradientmail.session.Session`'s progress record, rewritten every publish
        period and on exit::

            {"learner", "state": "running" | "finished" | "failed", "error": type or null,
             "started_at", "updated_at", "finished_at" (unix seconds or null),
             "steps", "samples", "rate" (smoothed samples/s),
             "units_claimed", "units_finished", "publish_every",
             "units": [[identifier, claimed_at, started_at, finished_at], ...]}

The table shows, per learner: state, units claimed and finished, samples, rate, and the age
of its last report. Below it: units claimed out of the total, units left (not finished), and
an ETA: units left ÷ the run's unit finish rate so far.

In the Gantt chart each row is a learner and each bar a unit, from its start (first item
trained) to its finish, coloured by lane. A unit's lane is its identifier up to the last
``-`` (``lane2-0017`` → ``lane2``); identifiers without ``-`` share one colour.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from gradientmail.errors import KeyNotFoundError, MissingDependencyError
from gradientmail.mailbox import Mailbox

__all__ = ["RunStatus", "format_status", "lane_of", "plot_gantt", "read_status"]


@dataclass
class RunStatus:
    """What a run's mailbox says about it, read at ``now``."""

    now: float
    #: units in the run (from ``manifest``), or ``None`` if no queue wrote one.
    total: int | None
    #: claim keys under ``units/``.
    claimed: int
    #: progress records, sorted by learner id.
    learners: list[dict[str, Any]] = field(default_factory=list)

    @property
    def finished(self) -> int:
        """Units finished, summed over learners."""
        return sum(int(r.get("units_finished") or 0) for r in self.learners)

    @property
    def left(self) -> int | None:
        """Units not finished yet (``None`` when the total is unknown)."""
        return None if self.total is None else max(0, self.total - self.finished)

    @property
    def running(self) -> bool:
        """Whether any learner is still running."""
        return any(r.get("state") == "running" for r in self.learners)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Records of learners that failed."""
        return [r for r in self.learners if r.get("state") == "failed"]

    @property
    def started_at(self) -> float | None:
        """When the first learner started."""
        starts = [float(r["started_at"]) for r in self.learners if r.get("started_at")]
        return min(starts) if starts else None

    def eta(self) -> float | None:
        """Seconds until every unit is finished at the rate so far, or ``None`` if unknown."""
        left, start = self.left, self.started_at
        if left is None or start is None:
            return None
        if left == 0:
            return 0.0
        if not self.running or self.finished == 0:
            return None
        return left * (self.now - start) / self.finished


def read_status(mailbox: Mailbox) -> RunStatus:
    """Read the manifest, count claims and read every learner's record."""
    total: int | None = None
    try:
        manifest = json.loads(mailbox.get("manifest"))
        if isinstance(manifest, dict) and isinstance(manifest.get("units"), int):
            total = manifest["units"]
    except (KeyNotFoundError, ValueError):
        total = None
    claimed = sum(1 for _ in mailbox.list("units/"))
    learners = []
    for key in mailbox.list("learners/"):
        try:
            record = json.loads(mailbox.get(key))
        except (KeyNotFoundError, ValueError):
            continue
        if isinstance(record, dict):
            record.setdefault("learner", key.split("/", 1)[1])
            learners.append(record)
    learners.sort(key=lambda r: str(r.get("learner")))
    return RunStatus(now=time.time(), total=total, claimed=claimed, learners=learners)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def format_status(status: RunStatus) -> str:
    """The status table as text."""
    header = ("learner", "state", "claimed", "finished", "samples", "rate/s", "last report")
    rows = []
    for r in status.learners:
        state = str(r.get("state", "?"))
        if state == "failed" and r.get("error"):
            state = f"failed ({r['error']})"
        updated = r.get("updated_at")
        age = f"{_duration(status.now - float(updated))} ago" if updated else "never"
        rows.append(
            (
                str(r.get("learner")),
                state,
                str(r.get("units_claimed", 0)),
                str(r.get("units_finished", 0)),
                str(r.get("samples", 0)),
                f"{float(r.get('rate') or 0.0):.1f}",
                age,
            )
        )
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    if not rows:
        lines.append("(no learner has registered yet)")
    total = "?" if status.total is None else str(status.total)
    left = "?" if status.left is None else str(status.left)
    if status.left == 0 and status.total is not None:
        eta = "done"
    else:
        eta = _duration(status.eta())
    lines.append("")
    lines.append(
        f"units: {status.claimed} claimed of {total}, {status.finished} finished, "
        f"{left} left; ETA {eta}"
    )
    return "\n".join(lines)


def lane_of(identifier: str) -> str:
    """A unit's lane: its identifier up to the last ``-`` (``""`` when it has none)."""
    return identifier.rsplit("-", 1)[0] if "-" in identifier else ""


def plot_gantt(status: RunStatus, path: str) -> None:
    """Draw one row per learner and one bar per unit, coloured by lane, into ``path``.

    Raises:
        MissingDependencyError: matplotlib is not installed (``gradientmail[plot]``).
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as exc:
        error = MissingDependencyError("matplotlib", "plot")
        error.args = (
            "--plot needs the Python package 'matplotlib', which is not installed; "
            "install it with: pip install 'gradientmail[plot]'",
        )
        raise error from exc
    origin = status.started_at or status.now
    lanes: dict[str, int] = {}
    bars: list[tuple[int, float, float, str]] = []
    labels = []
    end_of_run = origin
    for row, record in enumerate(status.learners):
        units = record.get("units") or []
        labels.append(f"{record.get('learner')} ({len(units)} units)")
        until = float(record.get("finished_at") or record.get("updated_at") or status.now)
        for identifier, claimed, started, finished in units:
            begin = started if started is not None else claimed
            if begin is None:
                continue
            end = finished if finished is not None else until
            end_of_run = max(end_of_run, float(end))
            lane = lane_of(str(identifier))
            lanes.setdefault(lane, 0)
            bars.append((row, float(begin) - origin, float(end) - float(begin), lane))
    lanes = {lane: index for index, lane in enumerate(sorted(lanes))}
    figure = Figure(figsize=(10, 1.2 + 0.6 * max(1, len(labels))))
    axes = figure.add_subplot()
    palette = [f"C{i % 10}" for i in range(max(1, len(lanes)))]
    for row, start, width, lane in bars:
        axes.barh(row, width, left=start, height=0.6, color=palette[lanes[lane]], edgecolor="white")
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first learner started")
    axes.set_title(f"units per learner over time; makespan {end_of_run - origin:.1f}s")
    if len(lanes) > 1:
        axes.legend(
            handles=[Patch(color=palette[i], label=lane or "(none)") for lane, i in lanes.items()],
            title="lane",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize="small",
        )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
