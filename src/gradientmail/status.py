"""What a run's mailbox says about it: learners, units done and left, ETA.

``gradientmail status URL`` prints this; :func:`read_status` returns it. It only reads. The
run's keys are described in ``docs/shared-queue.md``.

Learners
    One row per learner that registered a progress record (``learners/{id}``, written by a
    :class:`~gradientmail.session.Session`) or holds a lease (``leases/{id}``). Its state:

    * ``running``: its lease is being renewed;
    * ``silent (lost in 20s)``: its lease missed a renewal (unrenewed for more than 1.5 of
      its renewal periods) but is not lost yet: a learner that died, or one paused or
      holding the GIL. The time is how long until its lease has been unrenewed for a whole
      lease, the earliest another learner may declare it lost and take its units over;
      they wait at least that long, and the ETA counts that wait. Past it, ``silent
      (takeover due)``: a learner waiting for work declares it lost at its next poll;
    * ``expired (unrenewed 2m)``: its lease was not renewed for longer than 1.5 leases,
      and no learner declared it lost: it died, or it is paused (as every learner is when
      none is left to declare it). Units it holds wait for a learner to take them over. The
      time is measured against the renewal time the lease records, the learner's wall
      clock, so a large clock difference between hosts can mislabel a learner here; the
      learners themselves never rely on it. An expired learner counts as not running;
    * ``finished`` / ``failed`` (with the error's type) / ``released`` (left early);
    * ``lost``: another learner declared its lease lost and took its units over. A lost
      learner has no ETA.

    Rows are sorted by learner id with numbers in numeric order (``rank2`` before
    ``rank10``), so DataLoader workers (``rank0-w0``, ``rank0-w1``) follow their rank.
    ``last seen`` is the newer of its last progress report and its last lease renewal, so
    an idle learner that is alive shows it. ``data wait %`` is the share of the learner's
    time (since its session started, until its last report) that its loop waited for data:
    the ``data_wait_s`` its
    :class:`~gradientmail.session.Session` published. A high figure means the GPU starves.

Epochs
    In a run of several epochs the table has an ``epoch`` column (the epoch each learner's
    lease names), and a line gives the units done in every epoch so far (one listing of
    each epoch's ``done/``). With ``--epoch k`` (``read_status(box, epoch=k)``) the learner
    table and ``--plot`` show only epoch ``k``: each learner's units claimed and finished
    there, and the learners that took none are left out (a rank's own session, with no
    units at all, stays).

Units (of the newest epoch, or ``--epoch``)
    ``done`` (completion records), ``in progress`` (claimed, not done, not released),
    ``reclaimed`` (taken over from a learner that died or left) and ``free`` (the rest).
    On a store without compare-and-swap, claims are permanent: a lost learner's units stay
    in progress forever, and the report says so.

The ETA is units left ÷ the run's completion rate so far, shown while a learner runs; at
least the wait for a silent learner to be declared lost while units are in progress.
Learners are read before completions, so a learner that finishes during a slow read is
never shown finished beside an older, incomplete count (which would read as stalled).
"""

from __future__ import annotations

import re
import time
from typing import Any

from gradientmail._record_codec import decode_record, read_record
from gradientmail._status_plot import lane_of, plot_gantt
from gradientmail._status_record import EpochProgress, RunStatus, number
from gradientmail._status_text import data_wait_share, format_status
from gradientmail._unit_rows import decode_rows
from gradientmail.backends._options import redact
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns._claims import parse_claim
from gradientmail.patterns._run_layout import (
    EPOCHS_PREFIX,
    LEARNERS_PREFIX,
    LEASES_PREFIX,
    MANIFEST_KEY,
    RunLayout,
)

__all__ = [
    "EpochProgress",
    "RunStatus",
    "as_json",
    "data_wait_share",
    "format_status",
    "lane_of",
    "latest_epoch",
    "plot_gantt",
    "read_status",
]

#: A lease not renewed for this many lease durations (by its recorded time) reads as expired.
EXPIRED_AFTER = 1.5


def latest_epoch(mailbox: Mailbox) -> int:
    """The highest epoch with any key under ``epochs/{k}/``; 0 when there is none."""
    best = 0
    for key in mailbox.list(EPOCHS_PREFIX):
        head = key[len(EPOCHS_PREFIX) :].split("/", 1)[0]
        if head.isdigit():
            best = max(best, int(head))
    return best


#: A running lease unrenewed for this many of its renewal periods reads as ``silent``.
SILENT_AFTER = 1.5


def _silence(lease: dict[str, Any] | None, now: float) -> tuple[float, float] | None:
    """(seconds silent, seconds until it has been silent for a whole lease: the earliest
    others may declare it lost) for a running lease that missed a renewal; ``None`` while it
    renews on time (or is not running)."""
    if lease is None or lease.get("state") != "running":
        return None
    renewed, duration, period = lease.get("renewed_at"), lease.get("lease"), lease.get("period")
    if not (number(renewed) and number(duration)):
        return None
    if not number(period) or period <= 0:
        period = duration / 3
    silent = now - renewed
    if silent <= SILENT_AFTER * period:
        return None
    return silent, max(0.0, duration - silent)


def _learner_state(record: dict[str, Any], lease: dict[str, Any] | None, now: float) -> str:
    if lease is not None:
        state = lease.get("state")
        renewed, duration = lease.get("renewed_at"), lease.get("lease")
        if state == "lost":
            return "lost"
        expired = number(renewed) and number(duration) and now - renewed > EXPIRED_AFTER * duration
        if state == "running" and expired:
            return "expired"  # silent past the lease, and not declared lost by anyone
        if _silence(lease, now) is not None and record.get("state") in (None, "running"):
            return "silent"
        if state in ("released", "finished") and record.get("state") in (None, "running"):
            return str(state)
    return str(record.get("state") or (lease or {}).get("state") or "?")


def _only_epoch(row: dict[str, Any], lease: dict[str, Any] | None, epoch: int) -> bool:
    """Keep in ``row`` only the units of ``epoch``, with their counts; whether to show it
    (it has units there, names the epoch in its lease, or reports no units at all)."""
    units = row.get("units")
    if not isinstance(units, list):
        return True  # a rank's own session, counting steps: shown in every epoch
    mine = [unit for unit in units if unit.epoch == epoch]
    row["units"] = mine
    row["units_claimed"] = len(mine)
    row["units_finished"] = sum(1 for unit in mine if unit.finished is not None)
    named = (lease or {}).get("epochs") or [(lease or {}).get("epoch")]
    return bool(mine) or not units or epoch in named


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


def _done_per_epoch(mailbox: Mailbox, shown: RunLayout, newest: int, done: int) -> dict[int, int]:
    """Units done in the epoch shown (``done``) and in each other epoch up to the newest
    that has begun (any claim or completion): a run may skip epochs (``epochs=range(2,
    5)``), and an epoch nobody started is not an unfinished one."""
    counts = {}
    for k in range(max(newest, shown.epoch) + 1):
        if k == shown.epoch:
            counts[k] = done
            continue
        layout = RunLayout(k)
        finished = sum(1 for _ in mailbox.list(layout.done))
        if finished or next(iter(mailbox.list(layout.units)), None) is not None:
            counts[k] = finished
    return counts


def read_status(mailbox: Mailbox, epoch: int | None = None) -> RunStatus:
    """Read the manifest, the epoch's claims and completions, leases and progress records."""
    now = time.time()
    unreadable: list[str] = []
    manifest = read_record(mailbox, MANIFEST_KEY)
    total = manifest.get("units") if manifest else None
    if not isinstance(total, int) or isinstance(total, bool):
        total = None
    # Learners before completions: a learner that finishes while this reads is then seen
    # running beside a count that may be complete, never finished beside an old count
    # (which would read as stalled).
    leases = _records(mailbox, LEASES_PREFIX, unreadable)
    learners = _records(mailbox, LEARNERS_PREFIX, unreadable)
    newest = latest_epoch(mailbox)
    layout = RunLayout(newest if epoch is None else epoch)
    claimed = {key[len(layout.units) :] for key in mailbox.list(layout.units)}
    done = {key[len(layout.done) :] for key in mailbox.list(layout.done)}
    done_per_epoch = _done_per_epoch(mailbox, layout, newest, len(done))
    reclaimed = sum(1 for _ in mailbox.list(layout.reclaimed))
    in_progress = 0
    for ident in claimed - done:
        try:
            claim = parse_claim(mailbox.get(layout.units + ident))
        except LookupError:
            continue
        if claim is None or claim.extra.get("state") not in ("released", "done"):
            in_progress += 1
    for name in leases:
        learners.setdefault(name, {})
    rows = []
    for name, record in learners.items():
        row = dict(record)
        row["learner"] = name
        if isinstance(record.get("units"), list):
            row["units"] = decode_rows(record["units"])
        lease = leases.get(name)
        if epoch is not None and not _only_epoch(row, lease, epoch):
            continue  # it took no unit of the epoch asked for, and works in no other way there
        row["state"] = _learner_state(record, lease, now)
        silence = _silence(lease, now)
        if row["state"] == "silent" and silence is not None:
            row["silent_s"], row["lost_in_s"] = silence
        elif row["state"] == "expired" and silence is not None:
            row["silent_s"] = silence[0]
        renewed = (lease or {}).get("renewed_at")
        lease_epoch = (lease or {}).get("epoch")
        if isinstance(lease_epoch, int):
            row["epoch"] = lease_epoch
        lease_epochs = (lease or {}).get("epochs")
        if isinstance(lease_epochs, list) and len(lease_epochs) > 1:
            row["epochs"] = [k for k in lease_epochs if isinstance(k, int)]
        seen = [t for t in (record.get("updated_at"), renewed) if number(t)]
        if seen:
            row["seen_at"] = max(seen)
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
        epochs=EpochProgress(
            newest=newest,
            started=layout.epoch == 0 or next(iter(mailbox.list(layout.base)), None) is not None,
            done=done_per_epoch,
        ),
    )


#: The keys of a learner row in :func:`as_json`, when its records hold them.
_LEARNER_FIELDS = (
    "state",
    "epoch",
    "epochs",
    "error",
    "units_claimed",
    "units_finished",
    "samples",
    "steps",
    "rate",
    "data_wait_s",
    "started_at",
    "updated_at",
    "seen_at",
    "silent_s",
    "lost_in_s",
)


def as_json(status: RunStatus, url: str) -> dict[str, Any]:
    """``gradientmail status --json``: the facts of the table, for dashboards and alerts.

    Schema (version 2): ``schema`` (2), ``url``, ``now`` (unix seconds), ``epoch``,
    ``newest_epoch``, ``epoch_started``, ``units`` ({``total`` (``null`` if unknown),
    ``done``, ``in_progress``, ``reclaimed``, ``free``, ``left``}), ``complete`` (every
    unit of the epoch shown and of every epoch before it is done), ``epoch_complete``
    (every unit of the epoch shown is done), ``stalled``, ``eta_s`` (``null`` if unknown),
    ``unfinished_epochs`` ({epoch: units left}, epochs before the one shown),
    ``done_per_epoch`` ({epoch: units done}, the epoch shown and every other epoch up to
    the newest that has begun), ``learners``
    (one object per row, sorted like the table: ``learner``, ``state`` (``running``,
    ``silent``, ``expired``, ``finished``, ``failed``, ``released``, ``lost``), ``epoch``
    (the oldest epoch its lease names), ``epochs`` (the epochs it works in, where its
    epochs flow and two are open) and, where recorded, the other keys of
    ``_LEARNER_FIELDS``: counts, ``rate`` (samples/s), seconds and unix times), and
    ``unreadable`` (keys).
    ``gradientmail status --json`` adds ``shared_models``, the shared models of
    ``gradientmail.torch.Exchange`` in the mailbox (see ``docs/exchange.md``); on a mailbox
    that holds shared models but no queue run it prints ``schema``, ``url``, ``now`` and
    ``shared_models`` alone.
    New keys may be added; existing ones keep their meaning within a version. Version 2
    changed ``complete`` (in version 1, the epoch shown alone, now ``epoch_complete``).
    """
    learners = []
    for row in status.learners:
        entry = {"learner": row.get("learner")}
        entry.update({k: row[k] for k in _LEARNER_FIELDS if k in row})
        learners.append(entry)
    return {
        "schema": 2,
        "url": redact(url),
        "now": status.now,
        "epoch": status.epoch,
        "newest_epoch": status.epochs.newest,
        "epoch_started": status.epochs.started,
        "units": {
            "total": status.total,
            "done": status.done,
            "in_progress": status.in_progress,
            "reclaimed": status.reclaimed,
            "free": status.free,
            "left": status.left,
        },
        "complete": status.run_complete,
        "epoch_complete": status.complete,
        "stalled": status.stalled,
        "eta_s": status.eta(),
        "unfinished_epochs": {str(k): v for k, v in sorted(status.unfinished_epochs.items())},
        "done_per_epoch": {str(k): v for k, v in sorted(status.epochs.done.items())},
        "learners": learners,
        "unreadable": list(status.unreadable),
    }


def _natural(name: str) -> tuple[str | int, ...]:
    """A sort key that orders the numbers inside ``name`` numerically."""
    parts = re.split(r"(\d+)", name)  # text at even positions, digits at odd ones
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))
