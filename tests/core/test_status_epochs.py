"""``gradientmail status`` over epochs says what is true of each: a negative epoch is bad
usage, an epoch that never started is not "stalled", and a run whose newest epoch is done
but an older one is not is not "complete"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradientmail import from_url
from gradientmail._cli import main
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session
from gradientmail.status import format_status, read_status

UNITS = {f"u{i}": i for i in range(4)}


def run_epoch(url: str, epoch: int, stop_after: int | None = None) -> None:
    """One learner through epoch ``epoch``; with ``stop_after``, it leaves after that many."""
    box = from_url(url)
    with (
        Session(box, "a") as session,
        shared_queue(UNITS, mailbox=box, learner_id="a", load=lambda u: [u], epoch=epoch) as q,
    ):
        for n, _ in enumerate(q, 1):
            session.step()
            if stop_after is not None and n >= stop_after:
                break


def test_a_negative_epoch_is_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_epoch(f"file://{tmp_path}", 0)
    with pytest.raises(SystemExit) as exited:
        main(["status", f"file://{tmp_path}", "--epoch", "-1"])
    assert exited.value.code == 2
    assert "--epoch" in capsys.readouterr().err


def test_an_epoch_that_never_started_is_said_so_not_stalled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}"
    run_epoch(url, 0)
    run_epoch(url, 1)
    assert main(["status", url, "--epoch", "5"]) == 1
    out, err = capsys.readouterr()
    assert "stalled" not in out + err
    assert "epoch 5 of the run" in err
    assert "has not started" in err
    assert "the newest epoch with any claim is 1" in err
    status = read_status(from_url(url), 5)
    assert not status.epochs.started
    assert not status.stalled


def test_a_done_newest_epoch_beside_an_unfinished_older_one_is_not_run_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}"
    run_epoch(url, 0, stop_after=2)  # one unit done (the loop asked past it), three left
    run_epoch(url, 1)
    status = read_status(from_url(url))
    assert status.epoch == 1
    assert status.complete
    left = status.unfinished_epochs[0]
    assert left == 3
    text = format_status(status)
    assert "run complete" not in text
    assert f"epoch 1 complete, but not the whole run: epoch 0 ({left} left) unfinished" in text
    # Scripts and dashboards are not told it is complete either, and nobody works: stalled.
    assert main(["status", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["complete"], doc["epoch_complete"], doc["stalled"]) == (False, True, True)
    assert main(["status", url, "--watch", "--interval", "0.01"]) == 1
    capsys.readouterr()
    # Once epoch 0 is finished too, the run is complete.
    run_epoch(url, 0)
    text = format_status(read_status(from_url(url)))
    assert "run complete: every unit is done" in text
    assert main(["status", url]) == 0
    assert main(["status", url, "--watch", "--interval", "0.01"]) == 0
    assert main(["status", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["complete"] is True
    capsys.readouterr()


def test_each_learners_epoch_and_the_units_done_in_each_epoch_are_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}"
    run_epoch(url, 0)
    run_epoch(url, 1, stop_after=3)  # two units of epoch 1 done, two left
    status = read_status(from_url(url))
    assert status.epochs.done == {0: 4, 1: 2}
    assert [row.get("epoch") for row in status.learners] == [1]
    text = format_status(status)
    header, _, row = text.splitlines()[:3]
    assert header.split()[:3] == ["learner", "state", "epoch"]
    assert row.split()[0::2][:2] == ["a", "1"]
    assert "units done per epoch: 0: 4, 1: 2 (of 4 each)" in text
    # Shown from an older epoch, the newer one's count is there too.
    assert read_status(from_url(url), 0).epochs.done == {0: 4, 1: 2}
    assert main(["status", url, "--json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["done_per_epoch"] == {"0": 4, "1": 2}
    assert doc["learners"][0]["epoch"] == 1


def test_a_learner_working_in_two_flowing_epochs_shows_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """While its epochs flow, a learner's lease names the two it works in: the table shows
    ``0+1`` and the JSON both, beside ``epoch``, the oldest."""
    url = f"file://{tmp_path}"
    run_epoch(url, 0)
    box = from_url(url)
    with shared_queue(
        UNITS, mailbox=box, learner_id="b", load=lambda u: [u], epochs=range(1, 3)
    ) as q:
        next(q)
        q._lease.retarget(epoch=1, epochs=[1, 2])  # as when epoch 1 has nothing left free
        status = read_status(box)
        (row,) = [r for r in status.learners if r["learner"] == "b"]
        assert row["epoch"] == 1
        assert row["epochs"] == [1, 2]
        assert " 1+2 " in format_status(status)
        assert main(["status", url, "--json"]) in (0, 1)
        doc = json.loads(capsys.readouterr().out)
        (entry,) = [e for e in doc["learners"] if e["learner"] == "b"]
        assert entry["epochs"] == [1, 2]


def test_a_run_that_began_at_a_later_epoch_is_complete_once_its_epochs_are_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Epochs nobody started (a run of ``epochs=range(2, 4)``) are not unfinished ones."""
    url = f"file://{tmp_path}"
    run_epoch(url, 2)
    run_epoch(url, 3)
    status = read_status(from_url(url))
    assert status.epochs.done == {2: len(UNITS), 3: len(UNITS)}
    assert status.unfinished_epochs == {}
    assert status.run_complete
    assert not status.stalled
    assert "run complete: every unit is done" in format_status(status)
    assert main(["status", url, "--watch", "--interval", "0.01"]) == 0
    capsys.readouterr()
    assert main(["status", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["complete"], doc["stalled"]) == (True, False)
