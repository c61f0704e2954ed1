"""Count the TCP connections a store client opens: how hard it tried, not how long it took.

Every cloud backend's SDK connects through urllib3 (botocore for S3, requests for GCS and
Azure), and urllib3 makes each connection with ``urllib3.util.connection.create_connection``.
Counting its calls says how many attempts a call made against a dead endpoint, which is
what makes it fail fast or slowly, whatever the machine's speed.

* :func:`counting_connections`: in this process, the attempts to connect to one port.
* :data:`COUNTING_MAIN`: ``python -c COUNTING_MAIN MODULE ARGS...`` runs ``python -m MODULE
  ARGS...`` and writes the number of connection attempts it made to the file named by the
  ``GM_TEST_CONNECTIONS`` environment variable, for a CLI run as a user runs it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3.util.connection as connection

#: The environment variable naming the file :data:`COUNTING_MAIN` writes its count to.
COUNT_FILE = "GM_TEST_CONNECTIONS"

COUNTING_MAIN = f"""
import os, runpy, sys
import urllib3.util.connection as connection
attempts = 0
real = connection.create_connection
def counted(*args, **kwargs):
    global attempts
    attempts += 1
    return real(*args, **kwargs)
connection.create_connection = counted
try:
    runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
finally:
    with open(os.environ["{COUNT_FILE}"], "w") as out:
        out.write(str(attempts))
"""


@dataclass
class Connections:
    port: int
    attempts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def counting_connections(port: int) -> Iterator[Connections]:
    """Count the connection attempts to 127.0.0.1:``port`` made inside the block."""
    seen = Connections(port)
    real = connection.create_connection

    def counted(address: tuple[str, int], *args: Any, **kwargs: Any) -> Any:
        if address[1] == port:
            with seen.lock:
                seen.attempts += 1
        return real(address, *args, **kwargs)

    connection.create_connection = counted
    try:
        yield seen
    finally:
        connection.create_connection = real
