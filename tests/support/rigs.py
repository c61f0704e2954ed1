"""Backend rigs: one fixture that runs a test body on every backend.

A *rig* opens fresh, isolated mailboxes on one backend (a unique prefix, directory or name
per call). ``box`` is parametrized over every rig, so a contract test written once runs on
memory, file, S3, GCS and Azure. Emulator-backed rigs live in ``tests/emulators/*.py``; each
module exports ``RIGS``, a mapping of rig name → the name of a session fixture returning a
:class:`Rig`. The fixture starts its emulator on first use and stops it at session end.
"""

from __future__ import annotations

import itertools
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from gradientmail import Mailbox, from_url

_counter = itertools.count()


@dataclass
class Rig:
    """How to open fresh mailboxes on one backend."""

    name: str
    #: Base URL; ``fresh()`` appends a unique namespace below it.
    base_url: str
    #: Whether separate processes opening the same URL share keys.
    cross_process: bool = True
    #: Options passed to ``from_url`` (e.g. an endpoint); never secrets in messages.
    options: dict[str, object] | None = None
    #: Environment variables a worker process needs to reach the store.
    env: dict[str, str] | None = None
    #: Whether the store's conditional writes are atomic under races (moto's are not), so
    #: that a test may race on it and expect exactly one winner.
    atomic: bool = True

    @property
    def kwargs(self) -> dict[str, object]:
        """The options as keyword arguments for ``from_url`` or a backend constructor."""
        return dict(self.options or {})

    def open(self, url: str | None = None) -> Mailbox:
        """Open ``url`` (by default a fresh namespace) with this rig's options."""
        return from_url(self.url() if url is None else url, **self.kwargs)

    def url(self) -> str:
        """A URL for a namespace no other test uses."""
        return f"{self.base_url.rstrip('/')}/t{next(_counter)}-{uuid.uuid4().hex[:8]}"

    def fresh(self) -> Mailbox:
        """Open a mailbox in a new, empty namespace."""
        return self.open()


@pytest.fixture(scope="session")
def rig_memory() -> Rig:
    return Rig("memory", "memory://tests", cross_process=False)


@pytest.fixture(scope="session")
def rig_file(tmp_path_factory: pytest.TempPathFactory) -> Rig:
    return Rig("file", "file://" + str(tmp_path_factory.mktemp("file-rig")))


def all_rigs() -> dict[str, str]:
    """Rig name → session fixture name, for every backend the contract runs on."""
    from tests.support.emulators import azure, gcs, s3

    rigs = {"memory": "rig_memory", "file": "rig_file"}
    for module in (s3, gcs, azure):
        rigs.update(module.RIGS)
    return rigs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that uses ``rig`` (or ``box``) once per backend."""
    if "rig" in metafunc.fixturenames:
        metafunc.parametrize("rig", list(all_rigs()), indirect=True)


@pytest.fixture
def rig(request: pytest.FixtureRequest) -> Rig:
    """Every backend, one at a time (parametrized by ``pytest_generate_tests``)."""
    return request.getfixturevalue(all_rigs()[request.param])  # type: ignore[no-any-return]


@pytest.fixture
def box(rig: Rig) -> Iterator[Mailbox]:
    """A fresh, empty mailbox on every backend."""
    mailbox = rig.fresh()
    yield mailbox
    close: Callable[[], None] | None = getattr(mailbox, "close", None)
    if close is not None:
        close()


@pytest.fixture(params=["memory", "file"])
def local_rig(request: pytest.FixtureRequest) -> Rig:
    """``memory://`` and ``file://`` only: for mechanisms of gradientmail's own code above
    the Mailbox interface (a lease's takeover, settling an ambiguous write, a run's
    manifest), whose backend semantics the contract suite checks on every backend."""
    return request.getfixturevalue(f"rig_{request.param}")  # type: ignore[no-any-return]


@pytest.fixture
def local_box(local_rig: Rig) -> Mailbox:
    """A fresh, empty mailbox on ``memory://`` and ``file://`` (see :func:`local_rig`)."""
    return local_rig.fresh()


@pytest.fixture
def tmp_root() -> Iterator[str]:
    """A temporary directory for file:// tests that need the raw path."""
    with tempfile.TemporaryDirectory(prefix="gm-") as path:
        yield path
