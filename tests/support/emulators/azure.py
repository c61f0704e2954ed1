"""The ``azure`` rig: Azurite (blob service) on loopback, started on first use, stopped at
session end.

Azurite is installed under ``.emulators/`` by ``make`` (npm). It runs bound to 127.0.0.1 on
a free port, in memory, without telemetry, and accepting the current SDK's API version.
Mailboxes reach it through the ``connection_string`` option (Azurite's public, well-known
development key), so a mailbox pickled into a worker process reaches it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.support.emulators import TOOLS_DIR, Emulator, free_port, port_open, start

if TYPE_CHECKING:
    from tests.support.rigs import Rig

#: rig name -> session fixture name (collected by tests/rigs.py).
RIGS: dict[str, str] = {"azure": "rig_azure"}

#: The container every Azure rig mailbox lives in (each test gets its own prefix).
CONTAINER = "gradientmail-tests"

#: Azurite's documented development account key (public; not a secret).
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def connection_string(blob_endpoint: str) -> str:
    """An Azurite connection string whose blob endpoint is ``blob_endpoint``."""
    return (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={blob_endpoint}/devstoreaccount1;"
    )


@pytest.fixture(scope="session")
def azure_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running Azurite blob service, e.g. ``http://127.0.0.1:41234``."""
    port = free_port()
    command = [
        str(TOOLS_DIR / "node_modules" / ".bin" / "azurite-blob"),
        *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
        *("--inMemoryPersistence", "--disableTelemetry", "--silent", "--skipApiVersionCheck"),
    ]
    emulator: Emulator = start(
        "azurite", command, port, lambda: port_open(port), tmp_path_factory.mktemp("azurite")
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def rig_azure(azure_endpoint: str) -> Rig:
    """Azure mailboxes in one container of the session's Azurite."""
    from azure.core.exceptions import ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    from tests.support.rigs import Rig

    secret = connection_string(azure_endpoint)
    service = BlobServiceClient.from_connection_string(secret)
    try:
        service.create_container(CONTAINER)
    except ResourceExistsError:
        pass
    finally:
        service.close()
    return Rig("azure", f"az://{CONTAINER}", options={"connection_string": secret})
