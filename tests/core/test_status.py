"""``gradientmail status``: the right units and samples, during and after a run."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradientmail import Mailbox, MissingDependencyError, from_url
from gradientmail._cli import main
from gradientmail._status_record import RunStatus
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session
from gradientmail.status import format_status, lane_of, plot_gantt, read_status

UNITS = {f"lane{lane}-{i:02d}": i for lane in range(2) for i in range(6)}


def run_learner(box: Mailbox, learner: str, samples_per_item: int, out: dict[str, Any]) -> None:
    with (
        Session(box, learner, publish_every=60) as session,
        shared_queue(UNITS, mailbox=box, learner_id=learner, load=lambda u: [u, u]) as items,
    ):
        for _ in items:
            session.step(samples=samples_per_item)
        out[learner] = items.stats.snapshot()


def finished_run(box: Mailbox) -> dict[str, Any]:
    out: dict[str, Any] = {}
    threads = [
        threading.Thread(target=run_learner, args=(box, f"l{n}", n + 1, out)) for n in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return out


def test_status_reports_the_right_units_and_samples(box: Mailbox) -> None:
    stats = finished_run(box)
    status = read_status(box)
    assert status.total == len(UNITS)
    assert status.claimed == len(UNITS)
    assert status.left == 0
    assert status.eta() == 0.0
    assert [r["learner"] for r in status.learners] == ["l0", "l1", "l2"]
    for n, record in enumerate(status.learners):
        learner_stats = stats[f"l{n}"]
        assert record["units_claimed"] == learner_stats.units_claimed
        assert record["units_finished"] == learner_stats.units_finished
        assert record["samples"] == 2 * learner_stats.units_finished * (n + 1)
        assert record["state"] == "finished"
    text = format_status(status)
    assert f"units: {len(UNITS)} done of {len(UNITS)}, 0 in progress" in text
    assert "0 free" in text
    assert "ETA complete" in text


def test_status_works_while_the_run_is_in_progress(box: Mailbox) -> None:
    release = threading.Event()
    halfway = threading.Event()
    done: dict[str, Any] = {}

    def learner() -> None:
        def load(unit: int) -> Iterator[int]:
            yield unit

        with (
            Session(box, "busy", publish_every=60) as session,
            shared_queue(UNITS, mailbox=box, learner_id="busy", load=load, prefetch=1) as items,
        ):
            for n, _ in enumerate(items, 1):
                session.step(samples=10)
                if n == 4:
                    session.publish()
                    halfway.set()
                    assert release.wait(30)
        done["ok"] = True

    thread = threading.Thread(target=learner)
    thread.start()
    try:
        assert halfway.wait(30)
        # Completions are recorded by a background thread: wait (bounded) for the third.
        deadline = time.monotonic() + 30
        status = read_status(box)
        while status.done < 3 and time.monotonic() < deadline:
            status = read_status(box)
        (record,) = status.learners
        assert record["state"] == "running"
        assert record["samples"] == 40
        assert record["units_finished"] == 3  # the 4th is being trained on
        assert 4 <= status.claimed < len(UNITS)
        assert status.left == len(UNITS) - 3
        eta = status.eta()
        assert eta is not None
        assert eta > 0
        assert "running" in format_status(status)
    finally:
        release.set()
        thread.join(timeout=30)
    assert done == {"ok": True}


def test_status_without_a_run_says_so(box: Mailbox) -> None:
    status = read_status(box)
    assert status.total is None
    assert status.learners == []
    assert "no learner has registered yet" in format_status(status)


def test_cli_prints_the_table_and_exits_0(
    rig_file: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = rig_file.url()
    finished_run(from_url(url))
    assert main(["status", url]) == 0
    out = capsys.readouterr().out
    assert "l0" in out
    assert "finished" in out
    assert "0 free" in out
    assert main(["status", url, "--watch", "--interval", "0.01"]) == 0, "a finished run ends watch"


def test_cli_exits_1_when_a_learner_failed(
    rig_file: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = rig_file.url()
    box = from_url(url)
    with pytest.raises(ZeroDivisionError), Session(box, "crashed", publish_every=60):
        _ = 1 / 0
    assert main(["status", url]) == 1
    assert "failed (ZeroDivisionError)" in capsys.readouterr().out


def test_plot_draws_a_png(tmp_path: Path, rig_file: Any) -> None:
    url = rig_file.url()
    finished_run(from_url(url))
    target = tmp_path / "run.png"
    assert main(["status", url, "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def tiled_run(units: int, learners: int = 4, seconds: float = 100.0) -> RunStatus:
    """A finished run whose learners' units tile ``seconds`` end to end, a lane each."""
    began = time.time() - 3600
    per = units // learners
    width = seconds / per
    records = [
        {
            "learner": f"l{n}",
            "state": "finished",
            "started_at": began,
            "finished_at": began + seconds,
            "updated_at": began + seconds,
            "units": [
                [f"u-{n}-{i}", at, at, at + width, False]
                for i in range(per)
                for at in [began + i * width]
            ],
        }
        for n in range(learners)
    ]
    return RunStatus(now=began + seconds, total=units, claimed=units, done=units, learners=records)


def bar_pixels(path: Path) -> int:
    """Pixels of the first lane colour (matplotlib's C0) in a chart."""
    import numpy as np
    from matplotlib.image import imread

    rgb = (imread(path)[..., :3] * 255).round()
    return int(np.all(np.abs(rgb - (31, 119, 180)) <= 8, axis=-1).sum())


def test_plot_of_3000_units_shows_its_bars_not_their_separators(tmp_path: Path) -> None:
    coarse, fine = tmp_path / "40.png", tmp_path / "3000.png"
    plot_gantt(tiled_run(40), str(coarse))
    plot_gantt(tiled_run(3000), str(fine))
    # The same time is covered either way; only the separators between bars differ.
    assert bar_pixels(fine) >= 0.9 * bar_pixels(coarse) > 0


def test_plot_without_matplotlib_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    box = from_url("memory://status-no-mpl")
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'gradientmail\[plot\]'"):
        plot_gantt(read_status(box), str(tmp_path / "x.png"))


def test_lanes_come_from_identifiers() -> None:
    assert lane_of("lane2-0017") == "lane2"
    assert lane_of("a-b-3") == "a-b"
    assert lane_of("shard7") == ""


def test_status_survives_malformed_records_and_names_them(box: Mailbox) -> None:
    finished_run(box)
    box.put("learners/broken", b"\xff not json")
    box.put("learners/listed", b"[1, 2]")
    box.put("learners/typed", b'{"units_claimed": "many", "rate": "fast", "updated_at": "x"}')
    status = read_status(box)
    text = format_status(status)
    assert "warning: learners/broken does not hold a readable record; skipped" in text
    assert "warning: learners/listed does not hold a readable record; skipped" in text
    assert "typed" in text  # shown, with unreadable fields as zero or '-'
    assert status.complete


def test_epoch_filters_the_learner_table_and_the_plot(tmp_path: Path) -> None:
    """Epoch 0 trained by ``b`` alone, epoch 1 by ``a`` alone: ``--epoch k`` counts each
    learner's units of epoch k, leaves out the learner that took none there, and plots only
    those units."""
    box = from_url(f"file://{tmp_path / 'run'}")
    units = {f"u{i}": i for i in range(4)}
    for epoch, name in ((0, "b"), (1, "a")):
        with (
            Session(box, name, publish_every=60),
            shared_queue(
                units, mailbox=box, learner_id=name, load=lambda u: [u], epoch=epoch
            ) as queue,
        ):
            list(queue)
    whole = {r["learner"]: r["units_finished"] for r in read_status(box).learners}
    assert whole == {"a": 4, "b": 4}
    for epoch, name in ((0, "b"), (1, "a")):
        rows = read_status(box, epoch=epoch).learners
        assert [r["learner"] for r in rows] == [name]
        assert (rows[0]["units_claimed"], rows[0]["units_finished"]) == (4, 4)
        assert {u[5] for u in rows[0]["units"]} == {epoch}
    pytest.importorskip("matplotlib")
    path = tmp_path / "epoch1.png"
    plot_gantt(read_status(box, epoch=1), str(path))
    assert path.stat().st_size > 0


def test_the_plot_of_one_epoch_starts_at_that_epochs_first_unit(tmp_path: Path) -> None:
    """``--plot --epoch 1`` of a learner that trained epochs 0 and 1 in one session: the
    time axis starts at epoch 1's first unit, not at the session's start (which put epoch
    0's whole length of empty axis before the bars)."""
    from gradientmail._status_plot import _origin  # the axis itself is drawn by matplotlib

    box = from_url(f"file://{tmp_path / 'run'}")
    units = {f"u{i}": i for i in range(3)}
    with Session(box, "a", publish_every=60):
        for epoch in (0, 1):
            with shared_queue(
                units, mailbox=box, learner_id="a", load=lambda u: [u], epoch=epoch
            ) as queue:
                list(queue)
    status = read_status(box, epoch=1)
    (row,) = status.learners
    first = min(u[2] for u in row["units"])  # when epoch 1's first unit began to load
    assert status.started_at is not None
    assert status.started_at < first
    assert _origin(status) == first


def test_the_plot_of_a_later_epoch_measures_its_time_from_that_epoch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``status --epoch 1 --plot`` of a learner whose session spent 900 s on epoch 0 and
    then 100 s on epoch 1: the chart's title gives epoch 1's makespan, 100 s, and its time
    axis (seconds since the first unit shown started) runs from 0 to 100, not from 900 to
    1,000 of a session's clock."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    drawn: list[Figure] = []
    save = Figure.savefig

    def keep(figure: Figure, *args: Any, **kwargs: Any) -> None:
        drawn.append(figure)  # read back what the PNG shows: the title and the axis
        save(figure, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    url = f"file://{tmp_path / 'run'}"
    box = from_url(url)
    began = time.time() - 2000
    units = [  # [identifier, claimed, loaded, finished, reclaimed, epoch]
        [f"u{i}", at, at, at + width, False, epoch]
        for epoch, start, width in ((0, began, 225.0), (1, began + 900, 25.0))
        for i in range(4)
        for at in [start + i * width]
    ]
    record = {
        "state": "finished",
        "started_at": began,
        "finished_at": began + 1000,
        "updated_at": began + 1000,
        "units_claimed": 8,
        "units_finished": 8,
        "units": units,
    }
    box.put("manifest", json.dumps({"units": 4}).encode())
    box.put("learners/a", json.dumps(record).encode())
    for i in range(4):  # every unit done in both epochs
        box.put(f"done/u{i}", b"{}")
        box.put(f"epochs/1/done/u{i}", b"{}")
    target = tmp_path / "epoch1.png"
    assert main(["status", url, "--epoch", "1", "--plot", str(target)]) == 0
    assert f"wrote {target}" in capsys.readouterr().out
    (figure,) = drawn
    (axes,) = figure.axes
    assert "makespan 100.0s" in axes.get_title()
    low, high = axes.get_xlim()
    assert low <= 0 < 100 <= high < 200
