"""The Gantt chart of ``gradientmail status --plot``: one row per learner, one bar per unit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradientmail._errors import MissingDependencyError
from gradientmail._status_record import number

if TYPE_CHECKING:
    from gradientmail._status_record import RunStatus

__all__ = ["lane_of", "plot_gantt"]


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
            (float(t) for t in (record.get("finished_at"), record.get("updated_at")) if number(t)),
            status.now,
        )
        for entry in units:
            identifier, claimed, started, finished = entry[:4]
            begin = started if number(started) else claimed
            if not number(begin):
                continue
            end = float(finished) if number(finished) else until
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
