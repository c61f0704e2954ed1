"""Starting and stopping object-store emulators for the test session.

Every emulator binds to 127.0.0.1 on a free port, is started on first use by a session
fixture, and is stopped (and its process group killed) when the session ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Where emulator binaries installed by `make` live (Azurite's node_modules, etc.).
TOOLS_DIR = Path(__file__).resolve().parents[3] / ".emulators"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


@dataclass
class Emulator:
    """A running emulator process."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def stop(self) -> None:
        """Terminate the emulator's whole process group, then reap it."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the emulator's output, for failure messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def start(
    name: str,
    command: Sequence[str],
    port: int,
    ready: Callable[[], bool],
    log_dir: Path,
    *,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Emulator:
    """Start ``command`` in its own process group and wait until ``ready()`` is true.

    Raises:
        RuntimeError: the process exited or was not ready within ``timeout`` seconds; the
            message includes the end of its log.
    """
    if shutil.which(command[0]) is None and not Path(command[0]).exists():
        raise RuntimeError(f"{name}: {command[0]!r} is not installed; run `make test` to set up")
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        list(command),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )
    emulator = Emulator(name, process, port, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{emulator.log_tail()}")
        try:
            if ready():
                return emulator
        except Exception:  # noqa: BLE001 - not ready yet; any error means "try again"
            pass
        time.sleep(0.1)  # polling a readiness probe, not synchronising test logic
    emulator.stop()
    raise RuntimeError(f"{name} was not ready after {timeout:.0f} s:\n{emulator.log_tail()}")
