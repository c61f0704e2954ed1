"""Races with real threads and processes on memory, file, GCS and Azure (S3: test_s3.py).

Exactly one winner per key, and the stored bytes are the winner's; a CAS counter ends at
exactly N×K. The races run through the same machinery the shipped conformance suite uses.
"""

from __future__ import annotations

import pytest

from gradientmail.conformance._races import Mode, cas_counter, race_put_if_absent
from tests.support.rigs import Rig


def _assert_single_winner(report: object) -> None:
    from gradientmail.conformance._races import RaceReport

    assert isinstance(report, RaceReport)
    assert report.errors == {}
    assert report.multiple_winners() == {}, report.counterexample()
    assert report.no_winner() == [], report.counterexample()
    assert report.wrong_bytes() == {}, report.counterexample()
    assert sum(len(w) for w in report.winners.values()) == len(report.keys)


#: (rig fixture, racers, keys, mode): the sizes each issue asked for. S3 races run on
#: SeaweedFS in test_s3.py (moto's conditional put is not atomic).
RACES = [
    ("rig_memory", 32, 500, "threads"),
    ("rig_file", 32, 500, "threads"),
    ("rig_file", 8, 500, "processes"),
    ("rig_gcs", 16, 200, "threads"),
    ("rig_gcs", 4, 200, "processes"),
    ("rig_azure", 16, 200, "threads"),
    ("rig_azure", 4, 200, "processes"),
]

#: (rig fixture, workers, increments, mode) for the N×K compare-and-swap counter.
COUNTERS = [
    ("rig_memory", 8, 200, "threads"),
    ("rig_file", 8, 200, "processes"),
    ("rig_gcs", 8, 10, "threads"),
    ("rig_gcs", 4, 10, "processes"),
    ("rig_azure", 8, 10, "threads"),
    ("rig_azure", 4, 10, "processes"),
]


@pytest.mark.parametrize(("rig_name", "racers", "keys", "mode"), RACES)
def test_one_winner_per_key(
    request: pytest.FixtureRequest, rig_name: str, racers: int, keys: int, mode: Mode
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    report = race_put_if_absent(rig.fresh(), racers=racers, keys=keys, mode=mode, payload_size=4096)
    _assert_single_winner(report)


@pytest.mark.parametrize(("rig_name", "workers", "increments", "mode"), COUNTERS)
def test_cas_counter_ends_at_n_times_k(
    request: pytest.FixtureRequest, rig_name: str, workers: int, increments: int, mode: Mode
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    report = cas_counter(rig.fresh(), workers=workers, increments=increments, mode=mode)
    assert report.ok, report.counterexample()
    assert report.final == workers * increments


def test_race_report_detects_double_winners() -> None:
    """The race checks themselves must be able to fail (see also the conformance fakes)."""
    from gradientmail.conformance._races import RaceReport, payload_for

    report = RaceReport(["p/k0", "p/k1"], ["racer-0", "racer-1"])
    report.winners = {"p/k0": ["racer-0", "racer-1"], "p/k1": ["racer-1"]}
    report.stored = {"p/k0": payload_for("racer-0", 16), "p/k1": payload_for("racer-0", 16)}
    assert not report.ok
    assert report.counterexample() == (
        "key k0: 2 winners (racer-0, racer-1); 1 of 2 keys had more than one winner"
    )
    assert "p/k1" in report.wrong_bytes()
