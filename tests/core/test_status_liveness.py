"""Status tells a silent learner from a running one, and a live idle one from a dead one."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gradientmail._cli.status as status_cli
from gradientmail import LeaseLostError, Mailbox, from_url
from gradientmail._cli import main
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.session import Session
from gradientmail.status import format_status, read_status
from tests.support.delegating import Delegating


@pytest.fixture
def box(local_box: Mailbox) -> Mailbox:
    """``memory://`` and ``file://``: the mechanism is gradientmail's own, above the
    Mailbox interface (see ``tests.support.rigs.local_rig``)."""
    return local_box


def put_lease(box: Mailbox, name: str, renewed_ago: float, lease: float = 60.0) -> None:
    record = {
        "holder": name,
        "incarnation": 1,
        "state": "running",
        "lease": lease,
        "period": lease / 3,
        "renewed_at": time.time() - renewed_ago,
    }
    box.put(f"leases/{name}", json.dumps(record).encode())


def put_progress(box: Mailbox, name: str, reported_ago: float, started_ago: float = 100) -> None:
    now = time.time()
    record = {"state": "running", "started_at": now - started_ago, "updated_at": now - reported_ago}
    box.put(f"learners/{name}", json.dumps(record).encode())


def test_a_lease_that_missed_renewals_reads_silent_with_the_time_until_lost(
    box: Mailbox,
) -> None:
    put_progress(box, "dead", reported_ago=40)
    put_lease(box, "dead", renewed_ago=40)  # period 20 s: 2 periods without a renewal
    put_progress(box, "alive", reported_ago=40)  # idle: nothing new to report...
    put_lease(box, "alive", renewed_ago=5)  # ...but its lease is renewed
    status = read_status(box)
    rows = {r["learner"]: r for r in status.learners}
    assert rows["dead"]["state"] == "silent"
    assert rows["dead"]["lost_in_s"] == pytest.approx(60 - 40, abs=2)  # a whole lease
    assert rows["alive"]["state"] == "running"
    alive = rows["alive"]
    assert alive["seen_at"] > alive["updated_at"]  # its renewal, not its report, is the newer
    text = format_status(status)
    assert f"silent (lost in {rows['dead']['lost_in_s']:.0f}s)" in text
    alive_line = next(line for line in text.splitlines() if line.startswith("alive"))
    assert alive_line.rstrip().endswith(f"{status.now - alive['seen_at']:.0f}s ago")
    assert status.running
    assert not status.stalled
    # Silent past a whole lease: a learner waiting for work declares it lost at its next poll.
    put_progress(box, "late", reported_ago=70)
    put_lease(box, "late", renewed_ago=70)
    late = next(r for r in read_status(box).learners if r["learner"] == "late")
    assert (late["state"], late["lost_in_s"]) == ("silent", 0.0)
    assert "silent (takeover due)" in format_status(read_status(box))


def test_a_lease_unrenewed_past_its_lease_reads_expired_never_lost_and_the_run_stalled(
    box: Mailbox,
) -> None:
    """Silent for longer than 1.5 leases and declared lost by no one: the learner may be
    dead, or paused (as every learner is when none is left to declare it). Status says
    expired, and for how long; the run, with no learner renewing a lease, reads stalled."""
    units = {f"u{i}": i for i in range(4)}
    with shared_queue(units, mailbox=box, learner_id="left", load=lambda u: [u]) as q:
        for n, _ in enumerate(q):
            if n == 1:
                break  # one unit done, the rest released: this learner's lease says released
    box.put("units/u3", json.dumps({"owner": "paused", "token": "t", "claimed_at": 0}).encode())
    put_progress(box, "paused", reported_ago=100)
    put_lease(box, "paused", renewed_ago=100)  # a 60 s lease, unrenewed for 100 s
    status = read_status(box)
    row = next(r for r in status.learners if r["learner"] == "paused")
    assert row["state"] == "expired"
    assert row["silent_s"] == pytest.approx(100, abs=2)
    assert "lost_in_s" not in row
    assert status.stalled
    assert status.eta() is None
    line = next(x for x in format_status(status).splitlines() if x.startswith("paused"))
    assert f"expired (unrenewed {row['silent_s']:.0f}s)" in line
    assert " lost" not in line


def test_the_eta_waits_for_a_silent_learner_holding_units(box: Mailbox) -> None:
    units = {f"u{i}": i for i in range(4)}
    with shared_queue(units, mailbox=box, learner_id="fast", load=lambda u: [u]) as q:
        for n, _ in enumerate(q):
            if n == 1:
                break  # one unit done (the loop asked past it), the rest released
    box.put("units/u3", json.dumps({"owner": "dead", "token": "t", "claimed_at": 0}).encode())
    for name, ago in (("dead", 40), ("fast", 0)):
        put_progress(box, name, reported_ago=ago, started_ago=1)  # at its rate: seconds left
        put_lease(box, name, renewed_ago=ago)
    status = read_status(box)
    assert status.in_progress == 1
    eta = status.eta()
    assert eta is not None
    # The dead learner's wait until it may be declared lost (a whole lease unrenewed):
    # the fast learner alone would finish at once.
    assert eta == pytest.approx(60 - 40, abs=3)


def test_watch_started_before_the_first_learner_waits_for_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"file://{tmp_path}"
    calls: list[int] = []
    real = status_cli.read_status

    def read_then_start(mailbox: Any, epoch: Any = None) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the watcher has seen no run once: now the run starts
            box = from_url(url)
            with shared_queue({"a": 1}, mailbox=box, learner_id="n", load=lambda u: [u]) as q:
                list(q)
        return real(mailbox, epoch)

    monkeypatch.setattr(status_cli, "read_status", read_then_start)
    assert main(["status", url, "--watch", "--interval", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "yet; waiting for one to start" in out
    assert "run complete" in out


def test_watch_started_before_the_runs_directory_exists_waits_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a ``file://`` URL whose directory a learner creates later, ``--watch`` waits for
    the directory and then for the run, and never creates the directory itself."""
    url = f"file://{tmp_path / 'run'}"
    assert main(["status", url]) == 1  # without --watch: no run there
    assert not (tmp_path / "run").exists()
    naps: list[float] = []

    def nap(seconds: float) -> None:  # the watch's redraw pause: the run starts in one
        naps.append(seconds)
        if len(naps) == 1:
            assert not (tmp_path / "run").exists(), "the watch created the directory"
        if len(naps) == 2:
            box = from_url(url)
            with shared_queue({"a": 1}, mailbox=box, learner_id="n", load=lambda u: [u]) as q:
                list(q)

    monkeypatch.setattr(status_cli, "time", SimpleNamespace(sleep=nap))
    assert main(["status", url, "--watch", "--interval", "0.01"]) == 0
    out = capsys.readouterr().out
    assert out.count("yet; waiting for one to start") == 1
    assert "run complete" in out
    assert len(naps) == 2, "it did not wait for the directory before the run started"


def test_status_json_holds_the_facts_of_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"file://{tmp_path}"
    box = from_url(url)
    units = {f"u{i}": i for i in range(3)}
    from gradientmail.session import Session

    with (
        Session(box, "n") as session,
        shared_queue(units, mailbox=box, learner_id="n", load=lambda u: [u]) as q,
    ):
        for _ in q:
            session.step(samples=2)
    assert main(["status", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == 2
    assert doc["url"] == url
    assert doc["units"] == {
        "total": 3, "done": 3, "in_progress": 0, "reclaimed": 0, "free": 0, "left": 0
    }  # fmt: skip
    assert doc["complete"] is True
    assert doc["stalled"] is False
    assert doc["eta_s"] == 0.0
    (row,) = doc["learners"]
    assert row["learner"] == "n"
    assert row["state"] == "finished"
    assert row["units_finished"] == 3
    assert row["samples"] == 6
    assert doc["unfinished_epochs"] == {}


def test_a_lease_declared_lost_moments_ago_reads_lost_not_running(box: Mailbox) -> None:
    """A learner paused past its lease, declared lost by another the moment the lease ran
    out: its lease was renewed recently by the clock (not expired), and its progress record
    still says running. Status must follow the declaration, and count no ETA for it."""
    from gradientmail.patterns._lease_watch import LeaseWatcher
    from gradientmail.patterns._leases import Lease

    put_progress(box, "paused", reported_ago=1)
    holder = Lease(box, "leases/paused", "paused", duration=30)
    holder.acquire()  # renewed just now: neither expired nor silent by its record's time
    put_progress(box, "other", reported_ago=1)
    put_lease(box, "other", renewed_ago=1)
    before = {r["learner"]: r["state"] for r in read_status(box).learners}
    assert before == {"other": "running", "paused": "running"}
    watcher = LeaseWatcher(box, "leases/", duration=30)
    watcher.observe("paused")
    assert watcher.declare_lost("paused", by="other")
    status = read_status(box)
    rows = {r["learner"]: r for r in status.learners}
    assert rows["paused"]["state"] == "lost"
    assert rows["other"]["state"] == "running"
    assert "lost_in_s" not in rows["paused"]
    line = next(x for x in format_status(status).splitlines() if x.startswith("paused"))
    assert " lost " in f"{line} "


class _FinishesDuringAListing(Delegating):
    """The store as a learner finishing mid-read makes it: the first listing of ``prefix``
    shows what was there when it started, and the learner's last completion and its
    finished records land right after."""

    def __init__(self, inner: Mailbox, finish: dict[str, bytes], prefix: str = "done/") -> None:
        super().__init__(inner)
        self.finish = finish
        self.prefix = prefix
        self.fired = False

    def list(self, prefix: str = "", **options: Any) -> Any:
        if prefix != self.prefix or self.fired:
            return self.inner.list(prefix, **options)
        self.fired = True
        listed = list(self.inner.list(prefix, **options))
        for key, data in self.finish.items():
            self.inner.put(key, data)
        return iter(listed)


def one_unit_before_the_end(box: Mailbox) -> dict[str, bytes]:
    """Learner ``a``'s run of two units, put back to just before its end: one unit left,
    the learner running and its lease fresh. Returns the records its end writes."""
    with (
        Session(box, "a"),
        shared_queue({"u0": 0, "u1": 1}, mailbox=box, learner_id="a", load=lambda u: [u]) as q,
    ):
        assert list(q) == [0, 1]
    last = sorted(box.list("done/"))[-1]
    finish = {key: box.get(key) for key in (last, "learners/a", "leases/a")}
    box.delete(last)
    for key in ("learners/a", "leases/a"):
        record = json.loads(finish[key])
        record.update(state="running", renewed_at=time.time(), updated_at=time.time())
        box.put(key, json.dumps(record).encode())
    return finish


def test_a_learner_finishing_while_status_reads_is_never_shown_stalled(box: Mailbox) -> None:
    """Status reads the learners before the completions: a learner that finishes in
    between is seen running beside an old count, never finished beside one (stalled)."""
    finish = one_unit_before_the_end(box)
    assert read_status(box).stalled is False  # the state before: one unit left, running
    racing = _FinishesDuringAListing(box, finish)
    status = read_status(racing)  # type: ignore[arg-type]
    assert racing.fired
    assert (status.done, status.complete) == (1, False)
    assert not status.stalled, "a learner that finished while status read was called stalled"
    assert read_status(box).complete  # and read again, the run is complete


def test_watch_ends_on_the_complete_run_when_its_learner_finishes_during_a_read(
    box: Mailbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``status --watch`` ends with exit 1 on a stalled run, so an alert or a script takes
    that as a dead run. A learner whose last records land while status lists
    ``reclaimed/`` (after it counted ``done/``, before it read anything else) is no
    stalled run: the watch draws it running, reads again, and ends on the complete run
    with exit 0."""
    racing = _FinishesDuringAListing(box, one_unit_before_the_end(box), prefix="reclaimed/")
    monkeypatch.setattr(status_cli, "from_url", lambda url: racing)
    assert main(["status", box.url, "--watch", "--interval", "0.01"]) == 0
    assert racing.fired
    out = capsys.readouterr().out
    assert "stalled" not in out
    assert "run complete" in out


def test_a_learner_declared_lost_while_it_still_trains_reads_lost_in_status_json(
    box: Mailbox, capsys: pytest.CaptureFixture[str]
) -> None:
    """A learner paused past its lease is declared lost, and another learner takes its
    units over and finishes the epoch, before the paused one notices at its next renewal.
    Until then its own progress record still says running; ``status --json`` must say lost
    (its units were taken over), not running."""
    from gradientmail.patterns._lease_watch import LeaseWatcher

    units = {f"u{i}": i for i in range(4)}
    with (
        Session(box, "paused", publish_every=60),
        shared_queue(
            units, mailbox=box, learner_id="paused", load=lambda u: [u], prefetch=1, lease=30
        ) as queue,
    ):
        taking = iter(queue)
        next(taking)  # it holds a unit, then pauses
        watcher = LeaseWatcher(box, "leases/", duration=30)
        watcher.observe("paused")
        assert watcher.declare_lost("paused", by="taker")  # as the taker does after a lease
        taken: list[int] = []

        def take() -> None:  # another learner: its own thread, without the paused one's session
            with shared_queue(
                units, mailbox=box, learner_id="taker", load=lambda u: [u], wait_for_others=True
            ) as taker:
                taken.extend(taker)

        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        thread.join(timeout=60)
        assert sorted(taken) == list(range(4))  # every unit, the paused one's included
        assert json.loads(box.get("learners/paused"))["state"] == "running"
        assert main(["status", box.url, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        states = {row["learner"]: row["state"] for row in doc["learners"]}
        assert states == {"paused": "lost", "taker": "finished"}
        assert doc["units"]["reclaimed"] >= 1
        assert doc["complete"] is True
        with pytest.raises(LeaseLostError):  # the paused learner notices at last
            list(taking)
