"""Verdicts that tell the truth: PASS, FAIL and INCONCLUSIVE, each with its exit status.

A store that could not be tested (dead endpoint, missing credentials, missing extra) is
INCONCLUSIVE, reported once, fast, with the cause and the fix, and never "NOT safe". A
store that dies mid-run fails the property that was running, with the cause; the rest are
INCONCLUSIVE, and the report says how to rerun them.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gradientmail import from_url
from gradientmail._cli import main
from gradientmail._errors import (
    BackendError,
    BucketNotFoundError,
    EndpointUnreachableError,
    MissingDependencyError,
)
from gradientmail.backends._base import Conflict, RetryPolicy, Stat
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.conformance import (
    EXIT_STATUS,
    PROPERTIES,
    Outcome,
    SuiteOptions,
    Verdict,
    check_store,
    run_property,
)
from gradientmail.conformance._context import Property, PropertyFailed
from gradientmail.conformance._preflight import diagnose, preflight
from gradientmail.conformance._properties import property_named, select_properties
from gradientmail.mailbox import Version
from tests.support.connections import COUNT_FILE, COUNTING_MAIN

LINE = re.compile(r"^(PASS|FAIL|SKIP|INCONCLUSIVE)  (\S+) +\d+\.\ds  \S")


def outcomes(lines: list[str]) -> dict[str, str]:
    """Property name → outcome, from a report."""
    return {m.group(2): m.group(1) for m in map(LINE.match, lines) if m}


def cli(*argv: str, env: dict[str, str] | None = None, code: str | None = None) -> Any:
    """Run ``gradientmail conformance ...`` in a fresh interpreter (or ``code`` instead);
    return (done, the connections it attempted, counted without ``code``)."""
    command = (
        [sys.executable, "-c", code, *argv]
        if code
        else [sys.executable, "-c", COUNTING_MAIN, "gradientmail", "conformance", *argv]
    )
    with tempfile.TemporaryDirectory(prefix="gm-conformance-") as tmp:
        count = Path(tmp, "connections")
        env = {**(os.environ if env is None else env), COUNT_FILE: str(count)}
        done = subprocess.run(  # the timeout is a hang
            command, capture_output=True, text=True, timeout=240, env=env, check=False
        )
        attempts = int(count.read_text()) if count.exists() else None
    return done, attempts


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def aws_env(**credentials: str) -> dict[str, str]:
    """This environment with only the given AWS credentials: no files, profiles or IMDS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_CONFIG_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        **credentials,
    )
    return env


def assert_inconclusive_once(done: Any, summary: str, error: str) -> list[str]:
    """Exit status 3, the error and its fix stated once, no property run, never "NOT safe"."""
    lines = done.stdout.splitlines()
    assert done.returncode == EXIT_STATUS[Verdict.INCONCLUSIVE] == 3, done.stdout + done.stderr
    assert len(lines) == 3, done.stdout  # the header, the cause with its fix, the verdict
    assert lines[1].startswith("INCONCLUSIVE  cannot test s3://my-bucket/tmp/conformance-")
    assert f": {summary}: put raised {error}: " in lines[1]
    assert lines[-1] == (
        f"verdict: INCONCLUSIVE: nothing was tested, because {summary} (see above). This "
        "says nothing about whether the store is safe to coordinate on."
    )
    assert "NOT safe" not in done.stdout
    assert sum(error in line for line in lines) == sum("Fix: " in line for line in lines) == 1
    assert done.stderr == ""
    return lines


# -- could not test: INCONCLUSIVE, fast, once -----------------------------------------------------


def test_dead_endpoint_is_inconclusive_after_one_call() -> None:
    url = f"s3://my-bucket/tmp?endpoint_url=http://127.0.0.1:{closed_port()}"
    done, attempts = cli(url, env=aws_env(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y"))
    lines = assert_inconclusive_once(done, "the store is unreachable", "EndpointUnreachableError")
    assert "Fix: check the endpoint (the endpoint_url option" in lines[1]
    # Fast: the preflight's put, retried as the policy allows, and nothing after it.
    assert attempts == RetryPolicy().attempts


def test_missing_credentials_are_inconclusive(silent_port: int) -> None:
    url = f"s3://my-bucket/tmp?endpoint_url=http://127.0.0.1:{silent_port}"
    done, attempts = cli(url, env=aws_env())
    lines = assert_inconclusive_once(
        done, "credentials are missing or refused", "AccessDeniedError"
    )
    assert "Fix: give this process credentials" in lines[1]
    # Fast: found before any request, so nothing waited on the port that never answers.
    assert attempts == 0


def test_missing_conformance_extra_is_inconclusive_not_unsafe(tmp_path: Path) -> None:
    """Without hypothesis, what needs it is INCONCLUSIVE; everything else still runs."""
    code = (
        "import sys; sys.modules['hypothesis'] = None; from gradientmail._cli import main; "
        "sys.exit(main(['conformance', *sys.argv[1:]]))"
    )
    done, _ = cli(f"file://{tmp_path}", "--quick", code=code)
    lines = done.stdout.splitlines()
    assert done.returncode == 3, done.stdout + done.stderr
    found = outcomes(lines)
    needing = {"list-start-after", "stateful-model", "race-threads", "race-processes"}
    assert {n for n, o in found.items() if o == "INCONCLUSIVE"} == needing
    assert {o for n, o in found.items() if n not in needing} == {"PASS"}
    assert sum("pip install 'gradientmail[conformance]'" in line for line in lines) == 2
    assert lines[1].startswith("note: hypothesis (the conformance extra) is not installed")
    assert lines[-1].startswith("verdict: INCONCLUSIVE: 15 of 19 properties hold")
    assert "NOT safe" not in done.stdout
    assert "--only list-start-after,stateful-model,race-threads,race-processes" in lines[-1]


def test_missing_store_extra_is_inconclusive_with_the_pip_line() -> None:
    code = (
        "import sys; sys.modules['boto3'] = sys.modules['botocore'] = None; "
        "from gradientmail._cli import main; sys.exit(main(['conformance', *sys.argv[1:]]))"
    )
    done, _ = cli(f"s3://my-bucket/tmp?endpoint_url=http://127.0.0.1:{closed_port()}", code=code)
    lines = done.stdout.splitlines()
    assert done.returncode == 3, done.stdout + done.stderr
    assert lines[0].startswith("INCONCLUSIVE  cannot test s3://my-bucket/tmp: the s3 extra is")
    assert lines[0].endswith("Fix: pip install 'gradientmail[s3]'")
    assert lines[-1].startswith("verdict: INCONCLUSIVE: nothing was tested, because the s3 extra")
    assert "NOT safe" not in done.stdout


# -- a store that dies mid-run -------------------------------------------------------------------


class DyingMailbox(MemoryMailbox):
    """Works until the first key of the namespace ``dies_in`` is touched; then refuses all.

    Like a server that crashes on one request and stays down: every later operation, from
    any handle, raises ``EndpointUnreachableError`` (connection refused).
    """

    dead: bool = False
    calls_after_death = 0
    touched_after_death: Counter[str] = Counter()  # noqa: RUF012 - reset by the fixture

    def __init__(self, name: str, dies_in: str) -> None:
        super().__init__(name)
        self.dies_in = dies_in

    def _gate(self, key: str) -> None:
        if key.startswith(self.dies_in + "-"):
            type(self).dead = True
        if type(self).dead:
            type(self).calls_after_death += 1
            type(self).touched_after_death[key] += 1
            raise EndpointUnreachableError("connection refused", key=key, backend=self.url)

    def __reduce__(self) -> Any:
        return (type(self), (self.name, self.dies_in))

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        self._gate(key)
        return super()._create(key, data, write_id)

    def _read(self, key: str) -> tuple[bytes, Version]:
        self._gate(key)
        return super()._read(key)

    def _stat(self, key: str) -> Stat | None:
        self._gate(key)
        return super()._stat(key)

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        self._gate(key)
        super()._write(key, data, write_id)

    def _delete(self, key: str) -> None:
        self._gate(key)
        super()._delete(key)

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        self._gate(prefix)
        return super()._iter_keys(prefix)


@pytest.fixture
def dying() -> Iterator[type[DyingMailbox]]:
    yield DyingMailbox
    DyingMailbox.dead = False
    DyingMailbox.calls_after_death = 0
    DyingMailbox.touched_after_death = Counter()


@pytest.mark.parametrize("dies_in", ["values-large", "race-threads"])
def test_store_dying_mid_run_fails_that_property_and_leaves_the_rest_inconclusive(
    dying: type[DyingMailbox], dies_in: str
) -> None:
    box = dying(f"dies-{dies_in}", dies_in)
    lines: list[str] = []
    report = check_store(box, SuiteOptions(quick=True, threads=4), say=lines.append)
    lines.append(report.verdict())
    names = [p.name for p in PROPERTIES]
    index = names.index(dies_in)
    expected = dict.fromkeys(names[:index], "PASS")
    expected.update(dict.fromkeys(names[index + 1 :], "INCONCLUSIVE"))
    expected[dies_in] = "FAIL"
    # Not shared across processes: skipped whether the store answers or not.
    expected.update(dict.fromkeys(("race-processes", "cas-counter-processes"), "SKIP"))
    assert outcomes(lines) == expected, "\n".join(lines)
    # The failing property names the cause; the others were not run at all.
    failed = "\n".join(lines[lines.index(next(x for x in lines if x.startswith("FAIL"))) :][:3])
    assert "EndpointUnreachableError" in failed or "connection refused" in failed
    assert (
        "then the store stopped answering (the store is unreachable; its keys may remain)" in failed
    )
    assert (
        report.result("cas-counter-threads").detail
        == f"not run: the store stopped answering during {dies_in}"
    )
    # Once it died, the store was asked only by the property that was running and by one
    # preflight probe (which found it dead): no later property touched it. The property
    # stopped at the first key that failed (a race at the one key each round's racers were
    # on) instead of retrying the rest key by key.
    touched = dying.touched_after_death
    assert sum(touched.values()) == dying.calls_after_death > 0
    namespaces = {key.split("/", 1)[0].rsplit("-", 1)[0] for key in touched}
    assert namespaces == {dies_in, "preflight"}, touched
    keys = [k for k in touched if k.startswith(dies_in) and not k.endswith("/")]
    assert len(keys) <= 2, touched
    # The verdict: FAIL, never "NOT safe", and how to rerun the rest.
    assert report.exit_status == 1
    verdict = lines[-1]
    assert verdict.startswith("verdict: FAIL: 1 of 19 properties failed")
    assert "NOT safe" not in "\n".join(lines)
    assert f"The store stopped answering during {dies_in}" in verdict
    rest = [n for n in names[index + 1 :] if n not in ("race-processes", "cas-counter-processes")]
    assert f"rerun them with --only {','.join(rest)}" in verdict
    assert "(or --only atomicity for the claims alone)" in verdict


def test_a_store_error_wrapped_as_a_failure_is_not_an_observed_violation() -> None:
    """A FAIL caused by the store's error, even inside a property's own check, is no
    counterexample: it never makes the verdict say "NOT safe"."""

    def refuses(ctx: Any) -> str:
        try:
            raise EndpointUnreachableError("connection refused", key="k")
        except EndpointUnreachableError as exc:
            raise PropertyFailed(f"put_if_absent raised {exc}") from exc

    prop = property_named("precondition-honoured")
    erroring = Property(prop.name, prop.protects, refuses, prop.requires, atomicity=True)
    result = run_property(erroring, MemoryMailbox("wrapped"), SuiteOptions())
    assert result.outcome is Outcome.FAIL
    assert not result.observed
    seen = run_property(prop, from_url("ignore-preconditions://wrapped"), SuiteOptions())
    assert seen.outcome is Outcome.FAIL
    assert seen.observed


# -- the CLI's verdicts, exit statuses and groups -------------------------------------------------


def test_exit_statuses_are_distinct_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    assert EXIT_STATUS == {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.INCONCLUSIVE: 3}
    with pytest.raises(SystemExit):
        main(["conformance", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for phrase in ("0 PASS", "1 FAIL", "3 INCONCLUSIVE", "2 bad URL or option"):
        assert phrase in help_text
    assert "``" not in help_text


def test_only_accepts_named_groups(capsys: pytest.CaptureFixture[str]) -> None:
    assert [p.name for p in select_properties("atomicity")] == [
        p.name for p in PROPERTIES if p.atomicity
    ]
    status = main(["conformance", "memory://groups", "--quick", "--only", "atomicity"])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0, "\n".join(lines)
    assert set(outcomes(lines)) == {p.name for p in PROPERTIES if p.atomicity}


def test_a_seen_atomicity_failure_says_not_safe(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["conformance", "ignore-preconditions://verdict", "--quick", "--only", "atomicity"]
    )
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert status == 1
    assert "NOT safe to coordinate on: two claimants can both win" in verdict


# -- the preflight --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "summary", "fix"),
    [
        (
            BucketNotFoundError("no such bucket"),
            "the bucket or container does not exist",
            "create it",
        ),
        (
            MissingDependencyError("boto3", "s3"),
            "the s3 extra is not installed",
            "gradientmail[s3]",
        ),
        (BackendError("answered 400"), "the store refused a plain put", "permissions"),
        (KeyError("bug"), "the backend failed with an unexpected error", "report it"),
    ],
)
def test_preflight_names_the_cause_and_the_fix(error: Exception, summary: str, fix: str) -> None:
    problem = diagnose(error, "put")
    assert problem.summary.startswith(summary)
    assert f"put raised {type(error).__name__}" in problem.cause
    assert fix in problem.fix


class HangingMailbox(MemoryMailbox):
    """Every write waits until released: a store that accepts connections and never answers."""

    writing = threading.Event()
    release = threading.Event()

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        self.writing.set()
        self.release.wait()
        super()._write(key, data, write_id)


@pytest.mark.timeout(60)  # a preflight that waited for the write would hang: see below
def test_preflight_gives_up_on_a_store_that_never_answers() -> None:
    try:
        problem = preflight(HangingMailbox("hangs"), deadline=0.5)
        # It returned while its put was still held, by a write only this test releases:
        # it gave up on the store instead of waiting for it.
        assert HangingMailbox.writing.is_set(), "the probe never reached the store"
        assert not HangingMailbox.release.is_set()
    finally:
        HangingMailbox.release.set()
    assert problem is not None
    assert problem.summary == "the store does not answer"
    assert problem.cause.startswith("a put, get, list and delete did not complete within 0.5 s")


@pytest.mark.parametrize(
    "argv",
    [
        ["--only", "race-threads", "--threads", "1"],  # one thread: no race can be run
        ["--only", "race-processes"],  # memory:// is not shared across processes
        ["--only", "race-processes,cas-counter-processes"],
    ],
    ids=["one-thread", "processes-on-memory", "every-selected-skipped"],
)
def test_a_run_in_which_no_property_held_is_never_a_pass(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["conformance", "memory://nothing-tested", *argv])
    lines = capsys.readouterr().out.splitlines()
    assert set(outcomes(lines).values()) == {"SKIP"}, "\n".join(lines)
    assert status == EXIT_STATUS[Verdict.INCONCLUSIVE] == 3, "\n".join(lines)
    assert lines[-1].startswith("verdict: INCONCLUSIVE: no property was tested"), lines[-1]
    assert "says nothing about the store" in lines[-1]
    assert "PASS" not in lines[-1]


def test_one_property_held_beside_skipped_ones_is_a_pass(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["conformance", "memory://one-held", "--only", "race-threads,race-processes"])
    lines = capsys.readouterr().out.splitlines()
    assert outcomes(lines) == {"race-threads": "PASS", "race-processes": "SKIP"}
    assert status == 0
    assert lines[-1].startswith("verdict: PASS: 1 of 2 properties hold; 1 skipped")
