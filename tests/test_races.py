"""Races with real threads and processes on memory:// and file:// (cloud races: test_s3/gcs/azure).

Exactly one winner per key, and the stored bytes are the winner's; a CAS counter ends at
exactly N×K. The races run through the same machinery the shipped conformance suite uses.
"""

from __future__ import annotations

import pytest

from gradientmail.conformance.races import cas_counter, race_put_if_absent
from tests.rigs import Rig


def _assert_single_winner(report: object) -> None:
    from gradientmail.conformance.races import RaceReport

    assert isinstance(report, RaceReport)
    assert report.errors == {}
    assert report.multiple_winners() == {}, report.counterexample()
    assert report.no_winner() == [], report.counterexample()
    assert report.wrong_bytes() == {}, report.counterexample()
    assert sum(len(w) for w in report.winners.values()) == len(report.keys)


@pytest.mark.parametrize("rig_name", ["rig_memory", "rig_file"])
def test_32_threads_race_for_500_keys(request: pytest.FixtureRequest, rig_name: str) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    report = race_put_if_absent(rig.fresh(), racers=32, keys=500, mode="threads")
    _assert_single_winner(report)


def test_8_processes_race_for_500_keys_on_file(rig_file: Rig) -> None:
    report = race_put_if_absent(
        rig_file.fresh(), racers=8, keys=500, mode="processes", payload_size=4096
    )
    _assert_single_winner(report)


def test_cas_counter_8_threads_on_memory(rig_memory: Rig) -> None:
    report = cas_counter(rig_memory.fresh(), workers=8, increments=200, mode="threads")
    assert report.ok, report.counterexample()
    assert report.final == 1600


def test_cas_counter_8_processes_on_file(rig_file: Rig) -> None:
    report = cas_counter(rig_file.fresh(), workers=8, increments=200, mode="processes")
    assert report.ok, report.counterexample()
    assert report.final == 1600


def test_race_report_detects_double_winners() -> None:
    """The race checks themselves must be able to fail (see also the conformance fakes)."""
    from gradientmail.conformance.races import RaceReport, payload_for

    report = RaceReport(["p/k0", "p/k1"], ["racer-0", "racer-1"])
    report.winners = {"p/k0": ["racer-0", "racer-1"], "p/k1": ["racer-1"]}
    report.stored = {"p/k0": payload_for("racer-0", 16), "p/k1": payload_for("racer-0", 16)}
    assert not report.ok
    assert report.counterexample() == (
        "key k0: 2 winners (racer-0, racer-1); 1 of 2 keys had more than one winner"
    )
    assert "p/k1" in report.wrong_bytes()
