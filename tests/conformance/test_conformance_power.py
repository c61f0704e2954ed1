"""What a PASS proves: contested keys, the stated bound, and races sized for a chosen bound.

The rare-failure fake (``check-then-write://...?fraction=F``) is non-atomic on a fraction
``F`` of keys, picked by hash, and truly atomic on the rest. It shows that the bound a clean
run states is real: a store that goes wrong on 1 % of keys fails the default run, and one
that goes wrong on 0.2 % fails a ``--bound 0.001`` run, in at least 19 of 20 runs each.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from gradientmail import from_url
from gradientmail._cli import main
from gradientmail.conformance import MailboxConformance, SuiteOptions
from gradientmail.conformance._fakes import CheckThenWriteMailbox, in_fraction
from gradientmail.conformance._power import double_win_bound, keys_for_bound
from gradientmail.conformance._races import race_put_if_absent
from tests.support import stress

POWER = re.compile(
    r"0 double winners in (\d+) contested keys[:,] (?:so )?a store that lets two claimants "
    r"win on more than (\S+) % of contested keys would have failed with 95 % confidence"
)
RACES = "race-threads,race-processes"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """Run ``gradientmail conformance ...`` in this process; return (status, stdout lines)."""
    status = main(["conformance", *argv])
    return status, capsys.readouterr().out.splitlines()


def exact_percent(contested: int) -> str:
    """The exact one-sided 95 % bound for zero failures in ``contested`` trials, as printed."""
    return f"{(1 - 0.05 ** (1 / contested)) * 100:.3g}"


def stated(line: str) -> tuple[int, str]:
    """(contested keys, bound in %) from a line stating a race's power."""
    found = POWER.search(line)
    assert found, line
    return int(found.group(1)), found.group(2)


# -- the arithmetic -------------------------------------------------------------------------------


@pytest.mark.parametrize("contested", [1, 2, 53, 150, 154, 598, 2995, 100_000])
def test_bound_is_the_exact_one_sided_95_percent_bound_for_zero_failures(contested: int) -> None:
    assert double_win_bound(contested) == pytest.approx(1 - 0.05 ** (1 / contested), rel=1e-12)
    # At the bound, seeing no failure in that many keys has probability exactly 5 %.
    assert (1 - double_win_bound(contested)) ** contested == pytest.approx(0.05)


@pytest.mark.parametrize(("bound", "keys"), [(0.001, 2995), (0.005, 598), (0.02, 149)])
def test_keys_for_bound_is_the_fewest_keys_that_reach_it(bound: float, keys: int) -> None:
    assert keys_for_bound(bound) == keys
    assert double_win_bound(keys) <= bound < double_win_bound(keys - 1)


def test_printed_bound_matches_the_contested_keys(capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = run_cli(capsys, "memory://power-print", "--only", "race-threads", "--quick")
    assert status == 0, "\n".join(lines)
    # The property's second line states its own power; the verdict states the run's.
    detail = lines[lines.index(next(x for x in lines if x.startswith("PASS  race-threads"))) + 1]
    contested, bound = stated(detail)
    assert bound == exact_percent(contested)
    assert stated(lines[-1]) == (contested, bound)
    # --quick runs the two fixed races only: 16 threads × 15 keys, 8 threads × 5 keys.
    assert contested == 15 + 5


def test_verdict_sums_contested_keys_of_thread_and_process_races(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, lines = run_cli(capsys, f"file://{tmp_path}", "--only", RACES, "--quick")
    assert status == 0, "\n".join(lines)
    each = [stated(lines[i + 1])[0] for i, x in enumerate(lines) if x.startswith("PASS  race-")]
    assert len(each) == 2
    total, bound = stated(lines[-1])
    assert total == sum(each)
    assert bound == exact_percent(total)


# -- a chosen bound -------------------------------------------------------------------------------


def test_bound_prints_the_plan_and_an_estimate_before_racing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, lines = run_cli(capsys, f"file://{tmp_path}", "--only", RACES, "--bound", "0.02")
    assert status == 0, "\n".join(lines)
    assert re.fullmatch(
        r"races sized for a 2 % bound at 95 % confidence: 149 contested keys "
        r"\(75 by up to 16 threads, 74 by up to 4 processes\), in batches of up to 250 "
        r"keys with a start line per key; estimated \d+ s of racing",
        lines[1],
    ), lines[1]
    assert lines[2].startswith("PASS  race-threads")
    total, bound = stated(lines[-1])
    assert total >= 149
    assert float(bound) <= 2
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.slow
def test_atomic_file_store_passes_a_tight_bound_shared_by_threads_and_processes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Threads and processes share the keys; the thread races top up in batches.

    At 0.1 % (2995 keys) with ``GM_STRESS=full``, 0.3 % (998 keys) in CI: the plan at 0.1 %
    runs in every CI run on ``memory://`` (below), and what ``file://`` adds is processes
    racing beside threads for one plan's keys.
    """
    bound, keys, threads, processes, stated_bound = (
        ("0.001", 2995, 1498, 1497, 0.1) if stress.FULL else ("0.003", 998, 499, 499, 0.3)
    )
    status, lines = run_cli(capsys, f"file://{tmp_path}", "--only", RACES, "--bound", bound)
    assert status == 0, "\n".join(lines)
    assert (
        f"{keys} contested keys ({threads} by up to 16 threads, {processes} by up to 4 processes)"
        in lines[1]
    )
    assert "batches of up to 250 keys, 16 threads" in lines[2]
    total, shown = stated(lines[-1])
    assert total >= keys
    assert float(shown) <= stated_bound
    assert [p.name for p in tmp_path.iterdir()] == []


def test_atomic_memory_store_passes_at_bound_0_001(capsys: pytest.CaptureFixture[str]) -> None:
    """Not shared across processes: the thread races take every planned key."""
    status, lines = run_cli(capsys, "memory://bound", "--only", RACES, "--bound", "0.001")
    assert status == 0, "\n".join(lines)
    assert "2995 contested keys (2995 by up to 16 threads)" in lines[1]
    assert stated(lines[-1])[0] >= 2995
    assert list(from_url("memory://bound").list()) == []


def test_bound_must_be_a_fraction(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["conformance", "memory://x", "--bound", "5"])
    assert exited.value.code == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err


def test_base_class_exposes_the_contested_keys_and_bound() -> None:
    class Suite(MailboxConformance):
        conformance_options = SuiteOptions(quick=True, bound=0.02)

    request = SimpleNamespace(node=SimpleNamespace(user_properties=[]))
    Suite().test_race_threads(from_url("memory://base-power"), request)  # type: ignore[attr-defined]
    figures = dict(request.node.user_properties)
    assert figures["contested_keys"] >= keys_for_bound(0.02)
    assert figures["double_win_bound"] == double_win_bound(figures["contested_keys"])
    assert figures["double_win_bound"] <= 0.02


# -- the rare-failure fake ------------------------------------------------------------------------


def test_rare_fake_picks_its_fraction_of_keys_by_hash() -> None:
    keys = [f"ns/k{i}" for i in range(20_000)]
    picked = [k for k in keys if in_fraction(k, 0.01)]
    assert 150 <= len(picked) <= 250
    assert picked == [k for k in keys if in_fraction(k, 0.01)]  # the key alone decides


def test_rare_fake_is_atomic_off_its_fraction_and_double_wins_on_it() -> None:
    box = CheckThenWriteMailbox.open("check-then-write://rare-unit", fraction=0.3)
    report = race_put_if_absent(box, racers=8, keys=60, prefix="p")
    bad = {k for k in report.keys if in_fraction(k, 0.3)}
    assert bad, "some keys must fall in the fraction"
    assert set(report.multiple_winners()) <= bad
    assert len(report.multiple_winners()) >= len(bad) // 2
    assert all(len(report.winners[k]) == 1 for k in report.keys if k not in bad)


def _fails(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> bool:
    status, lines = run_cli(capsys, url, "--only", "race-threads", *argv)
    assert status in (0, 1), "\n".join(lines)
    if status == 1:
        assert "winners (racer-" in "\n".join(lines)
    return status == 1


@pytest.mark.slow
def test_default_run_fails_a_store_non_atomic_on_1_percent_of_keys_19_of_20(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """598 contested keys: a miss has probability 0.99**598 = 0.25 %."""
    failed = sum(
        _fails(capsys, f"check-then-write://one-percent{run}?fraction=0.01") for run in range(20)
    )
    assert failed >= 19


@pytest.mark.slow
def test_bound_0_001_fails_a_store_non_atomic_on_0_2_percent_of_keys_19_of_20(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """2995 contested keys: a miss has probability 0.998**2995 = 0.25 %."""
    failed = sum(
        _fails(capsys, f"check-then-write://fifth{run}?fraction=0.002", "--bound", "0.001")
        for run in range(20)
    )
    assert failed >= 19
