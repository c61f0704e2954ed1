"""The table ``gradientmail status`` prints (:func:`format_status`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradientmail._status_record import number

if TYPE_CHECKING:
    from gradientmail._status_record import RunStatus

__all__ = ["data_wait_share", "format_status"]


def data_wait_share(record: dict[str, Any], now: float) -> float | None:
    """The share (0 to 1) of a learner's time its loop waited for data; ``None`` if unknown.

    The time runs from the record's ``started_at`` to its ``finished_at`` or, while it runs,
    its ``updated_at`` (when ``data_wait_s`` was measured).
    """
    waited, started = record.get("data_wait_s"), record.get("started_at")
    if not number(waited) or not number(started):
        return None
    end = next(
        (float(t) for t in (record.get("finished_at"), record.get("updated_at")) if number(t)),
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
    header: tuple[str, ...] = (
        "learner",
        "state",
        "claimed",
        "finished",
        "samples",
        "rate/s",
        "data wait %",
        "last seen",
    )
    epochs = status.epochs.newest > 0 or any(r.get("epoch") for r in status.learners)
    if epochs:
        header = (*header[:2], "epoch", *header[2:])
    rows = []
    for r in status.learners:
        state = str(r.get("state", "?"))
        if state == "failed" and r.get("error"):
            state = f"failed ({r['error']})"
        if state == "silent" and number(r.get("lost_in_s")):
            wait = float(r["lost_in_s"])
            state = f"silent (lost in {_duration(wait)})" if wait > 0 else "silent (takeover due)"
        elif state == "expired" and number(r.get("silent_s")):
            state = f"expired (unrenewed {_duration(float(r['silent_s']))})"
        updated = r.get("seen_at", r.get("updated_at"))
        age = f"{_duration(status.now - float(updated))} ago" if number(updated) else "never"
        rate = r.get("rate")
        share = data_wait_share(r, status.now)
        at = r.get("epoch")
        cells = (
            str(r.get("learner")),
            state,
            *([_epoch_cell(r) if isinstance(at, int) else "-"] if epochs else []),
            _int(r.get("units_claimed")),
            _int(r.get("units_finished")),
            _int(r.get("samples")),
            f"{float(rate):.1f}" if number(rate) else "-",
            "-" if share is None else f"{100 * share:.1f}",
            age,
        )
        rows.append(cells)
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
    if len(status.epochs.done) > 1:
        per = ", ".join(f"{k}: {done}" for k, done in sorted(status.epochs.done.items()))
        lines.append(f"units done per epoch: {per} (of {total} each)")
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
            "stalled: work is left but no learner renews its lease (each died, or is "
            "paused); start a learner with the same job to finish it (it resumes where the "
            "run stopped)"
        )
    if not status.takeovers:
        lines.append(
            "note: this store has no compare-and-swap, so claims are permanent: units of a "
            "lost learner are not taken over"
        )
    for key in status.unreadable:
        lines.append(f"warning: {key} does not hold a readable record; skipped")
    return "\n".join(lines)


def _epoch_cell(row: dict[str, Any]) -> str:
    """A learner's epoch: ``3``, or ``3+4`` while its epochs flow and it works in both."""
    both = row.get("epochs")
    if isinstance(both, list) and len(both) > 1:
        return "+".join(str(k) for k in both)
    return str(row.get("epoch"))
