"""The conventions every ``gradientmail`` command keeps.

``--version``; help text without reStructuredText markup; and every error, from any
command, as one line on stderr with a non-zero exit status, never a traceback. Each
command's own behaviour is tested beside its library module (test_race_cli.py,
test_status.py, test_conformance*.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gradientmail
from gradientmail._cli import SUBCOMMANDS, main, plain
from gradientmail.backends._base import RetryPolicy
from gradientmail.session import Session
from tests.support.connections import COUNT_FILE, COUNTING_MAIN
from tests.support.emulators import free_port
from tests.support.rigs import Rig

COMMANDS = sorted(SUBCOMMANDS)


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m gradientmail ARGV`` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gradientmail", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The error ``command`` printed: exactly one line on stderr; non-zero exit."""
    assert done.returncode != 0, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"gradientmail {command}: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_version_prints_the_installed_version() -> None:
    done = _cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gradientmail {gradientmail.__version__}\n"


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_is_plain_text(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"] if command else ["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "usage: gradientmail" in shown
    for markup in ("``", ":mod:", ":class:", ":func:", ":meth:", "`~"):
        assert markup not in shown
    if not command:
        assert "The gradientmail command line (also python -m gradientmail)." in shown


def test_plain_strips_literals_and_cross_references() -> None:
    text = (
        "The ``gradientmail`` command (:mod:`gradientmail.status`, :class:`~a.b.Lease`, "
        ":func:`the race <gradientmail.conformance._races.race_winners>`, :py:meth:`~Box.get`)"
    )
    assert plain(text) == "The gradientmail command (gradientmail.status, Lease, the race, get)"


# -- errors: one line on stderr, a non-zero exit ----------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nosuch://x", "unknown mailbox URL scheme 'nosuch'"),
        ("s3://Upper/run", "invalid bucket name 'Upper'"),
        ("memory://x?bogus=1", "unknown option(s) 'bogus'"),
    ],
)
def test_a_bad_url_is_one_line_on_stderr(
    command: str, url: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"gradientmail {command}: error: ")
    assert says in lines[0]


#: Connection attempts each command may make against a dead store before it reports it:
#: ``status`` stops at its first read (one call, retried by the policy); ``race`` stops
#: deleting its 200 keys at the first failure (what its pool of 8 had begun by then), and
#: never goes through the keys one by one.
ATTEMPTS = RetryPolicy().attempts
UNREACHABLE_ATTEMPTS = {"race": range(ATTEMPTS, 200), "status": range(ATTEMPTS, ATTEMPTS + 1)}


@pytest.mark.emulator
@pytest.mark.parametrize("command", ["race", "status"])
def test_an_unreachable_store_is_one_line_on_stderr(
    command: str, aws_test_env: dict[str, str], tmp_path: Path
) -> None:
    # (conformance reports an untestable store as its INCONCLUSIVE verdict instead.)
    url = f"s3://gm-tests/run?endpoint_url=http://127.0.0.1:{free_port()}"
    count = tmp_path / "connections"
    # As `python -m gradientmail`, counting its connection attempts (the timeout is a hang).
    done = subprocess.run(
        [sys.executable, "-c", COUNTING_MAIN, "gradientmail", command, url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **aws_test_env, COUNT_FILE: str(count)},
    )
    assert "nothing answered at http://127.0.0.1" in _one_error_line(done, command)
    # Fast: no key is read back or deleted one by one, with retries, from a dead store.
    attempts = int(count.read_text())
    assert attempts in UNREACHABLE_ATTEMPTS[command], attempts


def test_plot_into_a_missing_folder_is_a_one_line_error(rig_file: Rig, tmp_path: Path) -> None:
    url = rig_file.url()
    with Session(gradientmail.from_url(url), "l0", publish_every=60):
        pass  # a run with one learner
    target = tmp_path / "missing" / "run.png"
    done = _cli("status", url, "--plot", str(target))
    line = _one_error_line(done, "status")
    assert done.returncode == 2
    assert f"--plot: the folder {str(target.parent)!r} does not exist" in line
    assert not target.parent.exists()


def test_an_operating_system_error_is_one_line_with_exit_1(rig_file: Rig, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    url = rig_file.url()
    with Session(gradientmail.from_url(url), "l0", publish_every=60):
        pass
    target = tmp_path / "run.png"
    target.mkdir()  # a folder where the picture should go: the write fails
    done = _cli("status", url, "--plot", str(target))
    assert done.returncode == 1
    _one_error_line(done, "status")
