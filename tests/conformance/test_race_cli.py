"""`gradientmail race` and the demo example: who won what, and failure on a non-atomic store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradientmail import from_url
from gradientmail._cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_race_on_file_prints_one_winner_per_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["race", str(tmp_path), "--racers", "3", "--keys", "30"]) == 0
    out = capsys.readouterr().out
    assert "3 processes race for 30 keys" in out
    won = [int(line.split("won")[1].split()[0]) for line in out.splitlines() if "won" in line]
    assert len(won) == 3
    assert sum(won) == 30
    assert "exactly one winner" in out


def test_race_on_memory_uses_threads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "memory://race-cli", "--racers", "4", "--keys", "20"]) == 0
    assert "4 threads race" in capsys.readouterr().out


@pytest.mark.parametrize("url", ["memory://race-cleanup", "DIR"])
def test_race_leaves_no_keys_behind(tmp_path: Path, url: str) -> None:
    url = str(tmp_path) if url == "DIR" else url
    assert main(["race", url, "--racers", "3", "--keys", "25"]) == 0
    assert list(from_url(url).list()) == []


def test_race_keeps_its_keys_with_keep(tmp_path: Path) -> None:
    assert main(["race", str(tmp_path), "--racers", "2", "--keys", "7", "--keep"]) == 0
    kept = list(from_url(str(tmp_path)).list())
    assert len(kept) == 7
    assert len({key.split("/")[0] for key in kept}) == 1  # one race-<id>/ prefix


def test_race_on_a_non_atomic_store_cleans_up_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "ignore-preconditions://race-dirty", "--keys", "20"]) == 2
    assert "winners (racer-" in capsys.readouterr().err
    assert list(from_url("memory://race-dirty").list()) == []


def test_race_on_a_non_atomic_store_fails_with_a_counterexample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["race", "ignore-preconditions://race-cli", "--keys", "20"]) == 2
    err = capsys.readouterr().err
    assert "winners (racer-" in err


def test_bad_url_is_a_clear_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["race", "nosuch://x"]) == 2
    err = capsys.readouterr().err
    assert "unknown mailbox URL scheme 'nosuch'" in err
    assert "Traceback" not in err


def test_claim_race_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "claim_race.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "every unit has exactly one owner" in out
    assert (
        sum(int(line.split("won")[1].split()[0]) for line in out.splitlines() if "won" in line)
        == 200
    )
