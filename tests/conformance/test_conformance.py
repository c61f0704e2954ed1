"""The conformance suite itself: its teeth, its two front ends, its report and its cleanup.

Per-backend runs of the suite live in ``conformance/``; these tests prove that the suite
catches broken stores (and names the right property), that the CLI's exit codes, report
format, ``--seed`` replay and cleanup behave, and that the pytest base class skips what a
mailbox does not declare instead of passing it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from gradientmail import Capability, KeyNotFoundError, Mailbox, from_url
from gradientmail._cli import main
from gradientmail._errors import OutcomeUnknownError
from gradientmail.backends._base import Conflict
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.conformance import (
    PROPERTIES,
    MailboxConformance,
    Outcome,
    RaceReport,
    SuiteOptions,
    run_property,
    run_suite,
)
from gradientmail.conformance._properties import property_named
from gradientmail.conformance._races import race_put_if_absent
from gradientmail.conformance._workspace import below
from gradientmail.mailbox import BytesLike, Version
from tests.support import stress
from tests.support.rigs import Rig

LINE = re.compile(r"^(PASS|FAIL|SKIP)  (\S+) +\d+\.\ds  \S")
RACES = "race-threads,race-processes,cas-counter-threads,cas-counter-processes"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """Run ``gradientmail conformance ...`` in this process; return (status, stdout lines)."""
    status = main(["conformance", *argv])
    return status, capsys.readouterr().out.splitlines()


def outcomes(lines: list[str]) -> dict[str, str]:
    """Property name → PASS/FAIL/SKIP, from a report."""
    return {m.group(2): m.group(1) for m in map(LINE.match, lines) if m}


def detail(lines: list[str], name: str) -> str:
    """The report line of property ``name``."""
    return next(line for line in lines if LINE.match(line) and line.split()[1] == name)


def cli_subprocess(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run the real ``gradientmail conformance`` command in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "gradientmail", "conformance", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- stores that break one rule, for teeth that go beyond races ------------------------------------


class PrefixCollisionMailbox(MemoryMailbox):
    """Like SeaweedFS: creating ``p/a`` is refused while ``p/a/b`` exists, yet ``p/a`` is absent."""

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        if next(iter(self._iter_keys(key + "/")), None) is not None:
            return Conflict.LOST
        return super()._create(key, data, write_id)


class ListDropsMailbox(MemoryMailbox):
    """Listing silently drops keys that contain a space: only a sequence of operations shows it."""

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return (k for k in super()._iter_keys(prefix) if " " not in k)


class TreeOrderMailbox(MemoryMailbox):
    """Lists like a directory tree (``a/1`` before ``a-1``), as SeaweedFS does."""

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        return iter(sorted(super()._iter_keys(prefix), key=lambda k: k.split("/")))


class CaseInsensitiveMailbox(MemoryMailbox):
    """Folds case in names, as a case-insensitive filesystem does: two keys, one object."""

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        return super()._create(key.lower(), data, write_id)

    def _read(self, key: str) -> tuple[bytes, Version]:
        return super()._read(key.lower())


class NoCasMailbox(MemoryMailbox):
    """Declares atomic create only."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.ATOMIC_CREATE})


# -- the CLI ------------------------------------------------------------------------------------


def test_cli_passes_a_conformant_store_reports_every_property_and_cleans_up(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, lines = run_cli(capsys, f"file://{tmp_path}", "--quick", "--threads", "6")
    assert status == 0, "\n".join(lines)
    assert lines[0].startswith(f"gradientmail conformance file://{tmp_path}/conformance-")
    assert "seed" in lines[0]
    assert outcomes(lines) == {p.name: "PASS" for p in PROPERTIES}
    assert lines[-1].startswith("verdict: PASS: 19 of 19 properties hold")
    # Every key (and, for a directory, the run's own folder) is gone.
    assert list(from_url(f"file://{tmp_path}").list()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("conformance-")] == []


def test_cli_skips_undeclared_capabilities_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, lines = run_cli(capsys, "memory://cli-skips", "--quick", "--only", RACES)
    assert status == 0
    assert outcomes(lines) == {
        "race-threads": "PASS",
        "race-processes": "SKIP",
        "cas-counter-threads": "PASS",
        "cas-counter-processes": "SKIP",
    }
    assert "SHARED_ACROSS_PROCESSES" in detail(lines, "race-processes")
    assert "2 skipped (race-processes, cas-counter-processes)" in lines[-1]


def test_cli_fails_the_check_then_write_store_20_of_20_times_with_a_counterexample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The default run's race properties (threads); the process races are the slow test below.
    for run in range(20):
        status, lines = run_cli(
            capsys, f"check-then-write://teeth{run}", "--only", "race-threads,cas-counter-threads"
        )
        assert status == 1, f"run {run} passed a non-atomic store:\n" + "\n".join(lines)
        assert outcomes(lines) == {"race-threads": "FAIL", "cas-counter-threads": "FAIL"}
        assert re.search(
            r"key k\d+: \d+ winners \(racer-\d+, racer-\d+", detail(lines, "race-threads")
        )
        assert "increments lost" in detail(lines, "cas-counter-threads")
        assert lines[-1].startswith("verdict: FAIL: 2 of 2 properties failed")


def test_cli_default_run_fails_check_then_write_across_processes(tmp_path: Path) -> None:
    """The real command, in a subprocess, on the directory-backed (cross-process) fake."""
    done = cli_subprocess(f"check-then-write://{tmp_path}")
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout + done.stderr
    found = outcomes(lines)
    assert {n for n, o in found.items() if o == "FAIL"} == set(RACES.split(","))
    assert {o for n, o in found.items() if n not in RACES} == {"PASS"}
    assert "winners (racer-" in detail(lines, "race-processes")
    assert lines[-1].startswith("verdict: FAIL: 4 of 19 properties failed")
    assert [p.name for p in tmp_path.iterdir()] == []  # cleaned up after a failing run too


@pytest.mark.slow
@pytest.mark.timeout(900)  # 40 full CLI runs: 51 s alone, over 250 s beside other stress runs
def test_default_cli_run_fails_check_then_write_in_every_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The whole default run, N times; then the process races N times on the shared fake.

    N is 20 with ``GM_STRESS=full`` and 3 in CI: the per-run power of the race properties
    against a store that is rarely non-atomic is measured in test_conformance_power.py
    (19 of 20 runs at 0.2 % of keys); here every run must catch an always-racy store.
    """
    runs = stress.size(ci=3, full=20)
    for run in range(runs):
        status, lines = run_cli(capsys, f"check-then-write://full{run}")
        assert status == 1, f"run {run}:\n" + "\n".join(lines)
        assert outcomes(lines)["race-threads"] == "FAIL"
        assert "winners (racer-" in detail(lines, "race-threads")
    for run in range(runs):
        status, lines = run_cli(
            capsys, f"check-then-write://{tmp_path}", "--only", "race-processes"
        )
        assert status == 1, f"run {run}:\n" + "\n".join(lines)
        assert "winners (racer-" in detail(lines, "race-processes")


def test_cli_fails_a_store_that_ignores_preconditions(capsys: pytest.CaptureFixture[str]) -> None:
    status, lines = run_cli(capsys, "ignore-preconditions://cli", "--quick")
    assert status == 1
    failed = {n for n, o in outcomes(lines).items() if o == "FAIL"}
    assert {"precondition-honoured", "race-threads"} <= failed
    assert "declared-but-ignored precondition" in detail(lines, "precondition-honoured")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["nosuchscheme://x"], "unknown mailbox URL scheme"),
        (["memory://x", "--only", "no-such-property"], "--only names unknown properties"),
    ],
)
def test_cli_exits_2_on_bad_input(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert main(["conformance", *argv]) == 2
    assert expected in capsys.readouterr().err


def test_seed_is_printed_and_replays_the_same_race_shapes() -> None:
    def shapes(seed: str) -> str:
        done = cli_subprocess("memory://seeded", "--only", "race-threads", "--seed", seed)
        lines = done.stdout.splitlines()
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"seed {seed}" in lines[0]
        assert lines[-1].endswith(f"Seed {seed}")
        return detail(lines, "race-threads").split("races", 1)[1]

    first = shapes("1234")
    assert shapes("1234") == first
    assert shapes("98765") != first


def test_seed_replays_the_same_shrunk_program_of_the_stateful_model() -> None:
    runs = [
        cli_subprocess("ignore-preconditions://replay", "--only", "stateful-model", "--seed", "42")
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [1, 1]
    reports = [r.stdout.splitlines()[1:] for r in runs]  # the header names a fresh prefix
    # Durations differ from run to run, and so does the padding that aligns them: compare
    # the words (a 9.8 s run and a 10.2 s one differ in a column's width alone).
    programs = [[re.sub(r"\d+\.\ds", "", line).split() for line in report] for report in reports]
    assert programs[0] == programs[1]
    assert "Replay with --seed 42" in reports[0][-1]
    # The shrunk program: create a key twice, and the second create "wins".
    assert "state.put_if_absent(" in runs[0].stdout


def test_below_inserts_the_segment_before_the_query() -> None:
    assert (
        below("s3://b/p/?endpoint_url=http://h:1", "seg") == "s3://b/p/seg?endpoint_url=http://h:1"
    )
    assert below("memory://x", "seg") == "memory://x/seg"
    assert below("/tmp/d", "seg") == "file:///tmp/d/seg"


# -- the properties name the right failure ---------------------------------------------------------


def test_key_prefix_collision_is_named() -> None:
    result = run_property(
        property_named("key-prefix-collision"), PrefixCollisionMailbox("collide"), SuiteOptions()
    )
    assert result.outcome is Outcome.FAIL
    assert "key/prefix collision: put_if_absent('p1/a') returned False" in result.detail
    assert "get() says it does not exist" in result.detail


def test_distinct_keys_sharing_one_object_are_named() -> None:
    box = CaseInsensitiveMailbox("case-folding")
    result = run_property(property_named("keys-accepted"), box, SuiteOptions())
    assert result.outcome is Outcome.FAIL
    assert "put_if_absent('upper/LOWER') on a new key returned False" in result.detail
    assert "maps it to the same object as 'UPPER/lower'" in result.detail


def test_listing_out_of_ascending_order_is_named() -> None:
    result = run_property(property_named("list-prefixes"), TreeOrderMailbox("tree"), SuiteOptions())
    assert result.outcome is Outcome.FAIL
    assert "is not in ascending order: 'a/1' came before 'a-1'" in result.detail


def test_stateful_model_catches_what_single_checks_miss() -> None:
    report = run_suite(
        ListDropsMailbox("drops"),
        SuiteOptions(seed=1),
        properties=[property_named("stateful-model"), property_named("read-after-write")],
    )
    assert report.result("stateful-model").outcome is Outcome.FAIL
    assert report.result("read-after-write").outcome is Outcome.PASS


def test_every_property_deletes_what_it_wrote() -> None:
    box = from_url("memory://cleanup-check")
    report = run_suite(box, SuiteOptions(quick=True, threads=4))
    assert report.ok, "\n".join(report.lines())
    assert list(box.list()) == []


def test_race_counterexample_format_is_kept() -> None:
    report = RaceReport(
        keys=["p/k6", "p/k7"],
        racers=[f"racer-{i}" for i in range(12)],
        winners={"p/k6": ["racer-1"], "p/k7": ["racer-11", "racer-3"]},
        stored={"p/k6": b"racer-1|", "p/k7": b"racer-3|"},
        payload_size=0,
    )
    assert not report.ok
    assert report.counterexample() == (
        "key k7: 2 winners (racer-3, racer-11); 1 of 2 keys had more than one winner"
    )


def test_race_counterexample_names_the_racer_that_failed_not_the_broken_barrier() -> None:
    report = RaceReport(
        keys=["p/k0"],
        racers=["racer-0", "racer-1"],
        errors={
            "racer-0": "Traceback ...\nthreading.BrokenBarrierError",
            "racer-1": "Traceback ...\nBackendError: answered 500",
        },
    )
    assert report.counterexample() == "racer-1 failed: BackendError: answered 500"


class LandsThenUnknownMailbox(MemoryMailbox):
    """Every create lands, and then its caller hears ``OutcomeUnknownError``: as when the
    response is lost and reading back cannot tell. The contract allows it."""

    def put_if_absent(self, key: str, data: BytesLike) -> bool:
        if super().put_if_absent(key, data):
            raise OutcomeUnknownError("injected: the response was lost", key=key)
        return False

    def __reduce__(self) -> Any:
        return (type(self), (self.name,))  # racers get this class, not a plain memory://


def test_race_goes_on_past_unknown_outcomes_and_judges_the_bytes() -> None:
    box = LandsThenUnknownMailbox("unknown-outcomes")
    report = race_put_if_absent(box, racers=6, keys=12, prefix="u")
    assert report.ok, report.counterexample()
    assert report.contested == 12
    assert sorted(report.unknown) == sorted(report.keys)  # each key: one outcome unknown
    assert all(len(names) == 1 for names in report.unknown.values())
    result = run_property(property_named("race-threads"), box, SuiteOptions(quick=True))
    assert result.outcome is Outcome.PASS, result.detail
    assert "calls raised OutcomeUnknownError (allowed after a lost response)" in result.detail


# -- the pytest base class ------------------------------------------------------------------------


class TestMemoryThroughTheBaseClass(MailboxConformance):
    """What a third party writes: one fixture. Races across processes SKIP on memory://."""

    @pytest.fixture
    def mailbox(self, rig_memory: Rig) -> Mailbox:
        return rig_memory.fresh()


def request_stub() -> SimpleNamespace:
    """What the base class's tests use of pytest's ``request``: ``node.user_properties``."""
    return SimpleNamespace(node=SimpleNamespace(user_properties=[]))


def test_base_class_skips_undeclared_capabilities_with_the_reason() -> None:
    suite = MailboxConformance()
    box = NoCasMailbox("no-cas")
    with pytest.raises(pytest.skip.Exception, match="COMPARE_AND_SWAP"):
        suite.test_cas_counter_threads(box, request_stub())  # type: ignore[attr-defined]
    with pytest.raises(pytest.skip.Exception, match="correctly raise NotSupportedError"):
        suite.test_compare_and_swap(box, request_stub())  # type: ignore[attr-defined]


def test_base_class_fails_with_the_counterexample_and_seed() -> None:
    suite = MailboxConformance()
    box = from_url("check-then-write://base-class")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)race-threads failed.*winners.*seed="):
        suite.test_race_threads(box, request_stub())  # type: ignore[attr-defined]


def test_base_class_has_one_test_per_property() -> None:
    tests = {n for n in dir(MailboxConformance) if n.startswith("test_")}
    assert tests == {"test_" + p.name.replace("-", "_") for p in PROPERTIES}


def test_fakes_each_call_alone_behaves() -> None:
    """The non-atomic fake is only wrong under concurrency, which is what makes it a test."""
    box = from_url("check-then-write://alone")
    assert box.put_if_absent("k", b"1") is True
    assert box.put_if_absent("k", b"2") is False
    assert box.get("k") == b"1"
    with pytest.raises(KeyNotFoundError):
        box.get("missing")


def test_import_gradientmail_conformance_does_not_import_pytest() -> None:
    code = (
        "import sys, gradientmail.conformance, gradientmail._cli.conformance; "
        "print('pytest' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.stdout.strip() == "False"


# -- the package's layout ------------------------------------------------------------------------


def test_the_properties_package_exports_each_property_and_its_context() -> None:
    from gradientmail.conformance._properties import (
        BIG,
        Context,
        PropertyFailed,
        check_race_threads,
        check_stateful_model,
    )

    assert BIG == 6 << 20
    assert property_named("race-threads").check is check_race_threads
    assert property_named("stateful-model").check is check_stateful_model
    assert issubclass(PropertyFailed, AssertionError)
    assert Context.__module__ == "gradientmail.conformance._context"


def test_conformance_package_has_no_import_cycles() -> None:
    """Module-level and deferred imports alike: no module of the package reaches itself."""
    import ast

    import gradientmail.conformance as package

    root = Path(package.__file__).parent
    modules = {
        ".".join(
            ("gradientmail", "conformance", *p.relative_to(root).with_suffix("").parts)
        ).removesuffix(".__init__"): p
        for p in root.rglob("*.py")
    }
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        # A package's __init__ re-exporting its own submodules is not a cycle.
        edges[name] = {t for t in targets if t in modules and not t.startswith(name + ".")}
        edges[name].discard(name)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or reaches(n, goal, seen | {n}) for n in edges[start] - seen)

    assert [m for m in modules if reaches(m, m, set())] == []
