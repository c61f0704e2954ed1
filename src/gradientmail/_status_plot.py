"""The Gantt chart of ``gradientmail status --plot``: one row per learner, one bar per unit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradientmail._errors import MissingDependencyError
from gradientmail._status_record import number
from gradientmail._unit_rows import decode_rows

if TYPE_CHECKING:
    from gradientmail._status_record import RunStatus

__all__ = ["SEPARATOR_MIN_PIXELS", "lane_of", "plot_gantt"]

#: Inches and dots per inch of the chart's width.
_WIDTH, _DPI = 10, 120
#: A bar narrower than this many pixels is drawn without the white line that separates it
#: from its neighbours: at 3,000 units the lines would cover every bar.
SEPARATOR_MIN_PIXELS = 4.0


def lane_of(identifier: str) -> str:
    """A unit's lane: its identifier up to the last ``-`` (``""`` when it has none)."""
    return identifier.rsplit("-", 1)[0] if "-" in identifier else ""


def _origin(status: RunStatus) -> float:
    """Where the time axis starts: the first unit shown; without one, the run's start."""
    begins = []
    for record in status.learners:
        for unit in decode_rows(record.get("units")):
            if unit.began is not None:
                begins.append(unit.began)
    if begins:
        return min(begins)
    return status.now if status.started_at is None else status.started_at


def _bars(status: RunStatus, origin: float) -> tuple[list[str], list[tuple[Any, ...]], float]:
    labels, bars = [], []
    end_of_run = origin
    for row, record in enumerate(status.learners):
        units = decode_rows(record.get("units"))
        labels.append(f"{record.get('learner')} ({len(units)} units)")
        until = next(
            (float(t) for t in (record.get("finished_at"), record.get("updated_at")) if number(t)),
            status.now,
        )
        for unit in units:
            begin = unit.began
            if begin is None:
                continue
            end = unit.finished if unit.finished is not None else until
            end_of_run = max(end_of_run, end)
            lane = lane_of(unit.identifier)
            bars.append((row, begin - origin, end - begin, lane, unit.reclaimed))
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
    origin = _origin(status)
    labels, bars, end_of_run = _bars(status, origin)
    lanes = {lane: index for index, lane in enumerate(sorted({bar[3] for bar in bars}))}
    figure = Figure(figsize=(_WIDTH, 1.2 + 0.6 * max(1, len(labels))))
    axes = figure.add_subplot()
    palette = [f"C{i % 10}" for i in range(max(1, len(lanes)))]
    # About the axes' share of the width, in pixels per second of the run.
    per_second = 0.75 * _WIDTH * _DPI / max(end_of_run - origin, 1e-9)
    groups: dict[tuple[str, bool, bool], list[tuple[Any, ...]]] = {}
    for bar in bars:
        wide = bar[2] * per_second >= SEPARATOR_MIN_PIXELS
        groups.setdefault((bar[3], bar[4], wide), []).append(bar)
    for (lane, reclaimed, wide), group in groups.items():  # a call per kind: 3,000 bars are fast
        axes.barh(
            [bar[0] for bar in group],
            [bar[2] for bar in group],
            left=[bar[1] for bar in group],
            height=0.6,
            color=palette[lanes[lane]],
            edgecolor="black" if reclaimed else "white",
            # Narrow bars touch: no separator, and no blending of their edges with the white.
            linewidth=0.8 if wide else 0,
            antialiased=wide,
            hatch="//" if reclaimed else None,
        )
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the first unit shown started")
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
    figure.savefig(path, dpi=_DPI)
