"""What a run's mailbox says about it: learners, units done and left, ETA.

``gradientmail status URL`` prints this; :func:`read_status` returns it. It only reads. The
run's keys are described in :mod:`gradientmail.patterns.progress`.

Learners
    One row per learner that registered a progress record (``learners/{id}``, written by a
    :class:`~gradientmail.session.Session`) or holds a lease (``leases/{id}``). Its state:

    * ``running``: its lease is being renewed;
    * ``finished`` / ``failed`` (with the error's type) / ``released`` (left early);
    * ``lost``: its lease was declared lost by another learner, or was not renewed for
      longer than the lease by the renewal time it records. That time is the learner's wall
      clock, so a large clock difference between hosts can mislabel a learner here; the
      learners themselves never rely on it. A lost learner has no ETA.

    Rows are sorted by learner id with numbers in numeric order (``rank2`` before
    ``rank10``), so DataLoader workers (``rank0-w0``, ``rank0-w1``) follow their rank.
    ``data wait %`` is the share of the learner's time (since its session started, until
    its last report) that its loop waited for data: the ``data_wait_s`` its
    :class:`~gradientmail.session.Session` published. A high figure means the GPU starves.

Units (of the newest epoch, or ``--epoch``)
    ``done`` (completion records), ``in progress`` (claimed, not done, not released),
    ``reclaimed`` (taken over from a learner that died or left) and ``free`` (the rest).
    On a store without compare-and-swap, claims are permanent: a lost learner's units stay
    in progress forever, and the report says so.

The ETA is units left ÷ the run's completion rate so far, shown while a learner runs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from gradientmail.errors import MissingDependencyError
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns.claims import decode_record, parse_claim, read_record
from gradientmail.patterns.progress import (
    EPOCHS_PREFIX,
    LEARNERS_PREFIX,
    LEASES_PREFIX,
    MANIFEST_KEY,
    RunLayout,
)

__all__ = [
    "RunStatus",
    "data_wait_share",
    "format_status",
    "lane_of",
    "latest_epoch",
    "plot_gantt",
    "read_status",
]

#: A lease not renewed for this many lease durations (by its recorded time) reads as lost.
EXPIRED_AFTER = 1.5


@dataclass
class RunStatus:
    """What a run's mailbox says about it, read at ``now``."""

    now: float
    #: units in the run (from ``manifest``), or ``None`` if no queue wrote one.
    total: int | None
    #: claim keys of the epoch.
    claimed: int
    #: the epoch shown.
    epoch: int = 0
    #: units with a completion record.
    done: int = 0
    #: claimed, not done, not released.
    in_progress: int = 0
    #: units taken over from another learner.
    reclaimed: int = 0
    #: whether the store can take over units (compare-and-swap).
    takeovers: bool = True
    #: progress records merged with leases, sorted by learner id; each has a ``state``.
    learners: list[dict[str, Any]] = field(default_factory=list)
    #: keys that could not be read as records (named in the report, never fatal).
    unreadable: list[str] = field(default_factory=list)
    #: the newest epoch with any key; whether the epoch shown has any claim or completion
    #: (an epoch asked for with ``--epoch`` may not have started).
    newest_epoch: int = 0
    epoch_started: bool = True
    #: older epochs with units left, epoch -> units left (default view only).
    unfinished_epochs: dict[int, int] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        """Whether the mailbox holds a run at all."""
        return self.total is not None or bool(self.learners) or self.claimed > 0

    @property
    def finished(self) -> int:
        """Units done (completion records)."""
        return self.done

    @property
    def free(self) -> int | None:
        """Units nobody holds (``None`` when the total is unknown)."""
        if self.total is None:
            return None
        return max(0, self.total - self.done - self.in_progress)

    @property
    def left(self) -> int | None:
        """Units not done yet (``None`` when the total is unknown)."""
        return None if self.total is None else max(0, self.total - self.done)

    @property
    def complete(self) -> bool:
        """Every unit is done."""
        return self.total is not None and self.done >= self.total

    @property
    def running(self) -> bool:
        """Whether any learner is still running (holds a live lease)."""
        return any(r.get("state") == "running" for r in self.learners)

    @property
    def stalled(self) -> bool:
        """Work is left, learners were here, and none of them is running."""
        started = self.epoch_started
        return started and not self.complete and bool(self.learners) and not self.running

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Records of learners that failed."""
        return [r for r in self.learners if r.get("state") == "failed"]

    @property
    def started_at(self) -> float | None:
        """When the first learner started."""
        starts = [float(r["started_at"]) for r in self.learners if _number(r.get("started_at"))]
        return min(starts) if starts else None

    def eta(self) -> float | None:
        """Seconds until every unit is done at the rate so far, or ``None`` if unknown."""
        left, start = self.left, self.started_at
        if left is None or start is None:
            return None
        if left == 0:
            return 0.0
        if not self.running or self.done == 0:
            return None
        return left * (self.now - start) / self.done


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def latest_epoch(mailbox: Mailbox) -> int:
    """The highest epoch with any key under ``epochs/{k}/``; 0 when there is none."""
    best = 0
    for key in mailbox.list(EPOCHS_PREFIX):
        head = key[len(EPOCHS_PREFIX) :].split("/", 1)[0]
        if head.isdigit():
            best = max(best, int(head))
    return best


def _learner_state(record: dict[str, Any], lease: dict[str, Any] | None, now: float) -> str:
    if lease is not None:
        state = lease.get("state")
        renewed, duration = lease.get("renewed_at"), lease.get("lease")
        if state == "lost":
            return "lost"
        expired = (
            _number(renewed) and _number(duration) and now - renewed > EXPIRED_AFTER * duration
        )
        if state == "running" and expired:
            return "lost"
        if state in ("released", "finished") and record.get("state") in (None, "running"):
            return str(state)
    return str(record.get("state") or (lease or {}).get("state") or "?")


def _records(mailbox: Mailbox, prefix: str, unreadable: list[str]) -> dict[str, dict[str, Any]]:
    """Name → record for every key under ``prefix``; unreadable keys are noted, not fatal."""
    found: dict[str, dict[str, Any]] = {}
    for key in mailbox.list(prefix):
        try:
            body = decode_record(mailbox.get(key))
        except LookupError:
            continue  # deleted since the listing
        if body is None:
            unreadable.append(key)
        else:
            found[key[len(prefix) :]] = body
    return found


def read_status(mailbox: Mailbox, epoch: int | None = None) -> RunStatus:
    """Read the manifest, the epoch's claims and completions, leases and progress records."""
    now = time.time()
    unreadable: list[str] = []
    manifest = read_record(mailbox, MANIFEST_KEY)
    total = manifest.get("units") if manifest else None
    if not isinstance(total, int) or isinstance(total, bool):
        total = None
    newest = latest_epoch(mailbox)
    layout = RunLayout(newest if epoch is None else epoch)
    claimed = {key[len(layout.units) :] for key in mailbox.list(layout.units)}
    done = {key[len(layout.done) :] for key in mailbox.list(layout.done)}
    unfinished: dict[int, int] = {}
    if epoch is None and total is not None:
        for older in range(newest):
            left = total - sum(1 for _ in mailbox.list(RunLayout(older).done))
            if left > 0:
                unfinished[older] = left
    reclaimed = sum(1 for _ in mailbox.list(layout.reclaimed))
    in_progress = 0
    for ident in claimed - done:
        try:
            claim = parse_claim(mailbox.get(layout.units + ident))
        except LookupError:
            continue
        if claim is None or claim.extra.get("state") not in ("released", "done"):
            in_progress += 1
    leases = _records(mailbox, LEASES_PREFIX, unreadable)
    learners = _records(mailbox, LEARNERS_PREFIX, unreadable)
    for name in leases:
        learners.setdefault(name, {})
    rows = []
    for name, record in learners.items():
        row = dict(record)
        row["learner"] = name
        row["state"] = _learner_state(record, leases.get(name), now)
        rows.append(row)
    rows.sort(key=lambda r: _natural(str(r["learner"])))
    return RunStatus(
        now=now,
        total=total,
        claimed=len(claimed),
        epoch=layout.epoch,
        done=len(done),
        in_progress=in_progress,
        reclaimed=reclaimed,
        takeovers=mailbox.supports(Capability.COMPARE_AND_SWAP),
        learners=rows,
        unreadable=unreadable,
        newest_epoch=newest,
        epoch_started=layout.epoch == 0 or next(iter(mailbox.list(layout.base)), None) is not None,
        unfinished_epochs=unfinished,
    )


def _natural(name: str) -> tuple[str | int, ...]:
    """A sort key that orders the numbers inside ``name`` numerically."""
    parts = re.split(r"(\d+)", name)  # text at even positions, digits at odd ones
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))


def data_wait_share(record: dict[str, Any], now: float) -> float | None:
    """The share (0 to 1) of a learner's time its loop waited for data; ``None`` if unknown.

    The time runs from the record's ``started_at`` to its ``finished_at`` or, while it runs,
    its ``updated_at`` (when ``data_wait_s`` was measured).
    """
    waited, started = record.get("data_wait_s"), record.get("started_at")
    if not _number(waited) or not _number(started):
        return None
    end = next(
        (float(t) for t in (record.get("finished_at"), record.get("updated_at")) if _number(t)),
        now,
    )
    elapsed = end - float(started)
    if elapsed <= 0:
        return None
    return min(1.0, max(0.0, float(waited) / elapsed))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _int(value: object) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "0"


def format_status(status: RunStatus) -> str:
    """The status table as text."""
    header = (
        "learner",
        "state",
        "claimed",
        "finished",
        "samples",
        "rate/s",
        "data wait %",
        "last report",
    )
    rows = []
    for r in status.learners:
        state = str(r.get("state", "?"))
        if state == "failed" and r.get("error"):
            state = f"failed ({r['error']})"
        updated = r.get("updated_at")
        age = f"{_duration(status.now - float(updated))} ago" if _number(updated) else "never"
        rate = r.get("rate")
        share = data_wait_share(r, status.now)
        rows.append(
            (
                str(r.get("learner")),
                state,
                _int(r.get("units_claimed")),
                _int(r.get("units_finished")),
                _int(r.get("samples")),
                f"{float(rate):.1f}" if _number(rate) else "-",
                "-" if share is None else f"{100 * share:.1f}",
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
    free = "?" if status.free is None else str(status.free)
    if status.complete:
        eta = "complete"
    elif status.stalled:
        eta = "none: no learner is running"
    else:
        eta = _duration(status.eta())
    epoch = f" (epoch {status.epoch})" if status.epoch else ""
    lines.append("")
    lines.append(
        f"units{epoch}: {status.done} done of {total}, {status.in_progress} in progress, "
        f"{status.reclaimed} reclaimed, {free} free; ETA {eta}"
    )
    older = ", ".join(
        f"epoch {k} ({left} left)" for k, left in sorted(status.unfinished_epochs.items())
    )
    if status.complete and older:
        lines.append(
            f"epoch {status.epoch} complete, but not the whole run: {older} unfinished; "
            "show one with --epoch K"
        )
    elif status.complete:
        lines.append("run complete: every unit is done")
    elif status.stalled:
        lines.append(
            "stalled: work is left but no live learner holds a lease; start a learner with "
            "the same job to finish it (it resumes where the run stopped)"
        )
    if not status.takeovers:
        lines.append(
            "note: this store has no compare-and-swap, so claims are permanent: units of a "
            "lost learner are not taken over"
        )
    for key in status.unreadable:
        lines.append(f"warning: {key} does not hold a readable record; skipped")
    return "\n".join(lines)


def lane_of(identifier: str) -> str:
    """A unit's lane: its identifier up to the last ``-`` (``""`` when it has none)."""
    return identifier.rsplit("-", 1)[0] if "-" in identifier else ""


def _bars(status: RunStatus, origin: float) -> tuple[list[str], list[tuple[Any, ...]], float]:
    labels, bars = [], []
    end_of_run = origin
    for row, record in enumerate(status.learners):
        units = [u for u in record.get("units") or [] if isinstance(u, list) and len(u) >= 4]
        labels.append(f"{record.get('learner')} ({len(units)} units)")
        until = next(
            (float(t) for t in (record.get("finished_at"), record.get("updated_at")) if _number(t)),
            status.now,
        )
        for entry in units:
            identifier, claimed, started, finished = entry[:4]
            begin = started if _number(started) else claimed
            if not _number(begin):
                continue
            end = float(finished) if _number(finished) else until
            end_of_run = max(end_of_run, end)
            reclaimed = bool(entry[4]) if len(entry) > 4 else False
            lane = lane_of(str(identifier))
            bars.append((row, float(begin) - origin, end - float(begin), lane, reclaimed))
    return labels, bars, end_of_run


def plot_gantt(status: RunStatus, path: str) -> None:
    """Draw one row per learner and one bar per unit, coloured by lane, into ``path``.

    Units taken over from another learner are hatched, on the row of the learner that
    finished them.

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
    labels, bars, end_of_run = _bars(status, origin)
    lanes = {lane: index for index, lane in enumerate(sorted({bar[3] for bar in bars}))}
    figure = Figure(figsize=(10, 1.2 + 0.6 * max(1, len(labels))))
    axes = figure.add_subplot()
    palette = [f"C{i % 10}" for i in range(max(1, len(lanes)))]
    for row, start, width, lane, reclaimed in bars:
        axes.barh(
            row,
            width,
            left=start,
            height=0.6,
            color=palette[lanes[lane]],
            edgecolor="black" if reclaimed else "white",
            hatch="//" if reclaimed else None,
        )
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first learner started")
    axes.set_title(f"units per learner over time; makespan {end_of_run - origin:.1f}s")
    handles = [Patch(color=palette[i], label=lane or "(none)") for lane, i in lanes.items()]
    if any(bar[4] for bar in bars):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="reclaimed"))
    if len(handles) > 1:
        axes.legend(
            handles=handles,
            title="lane",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize="small",
        )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
