"""Rigs for the s3 backend: moto_server and SeaweedFS, on loopback and free ports.

* ``rig_s3_moto`` (the ``s3`` entry of the contract matrix): ``moto_server``. Fast and
  faithful for single-client semantics and error mapping, but its conditional put is not
  atomic under concurrency, so races run elsewhere.
* ``rig_s3_seaweed``: SeaweedFS ``weed mini``, an independent S3 implementation whose
  conditional writes are atomic; used for the S3 races. It is not in the contract matrix:
  when ``p/a/b`` exists, a conditional create of ``p/a`` answers 412 although ``p/a`` reads
  as missing. Lost-response tests run on it too (test_cloud_faults.py).

Both start on first use and stop at the end of the session. The test session runs with
dummy AWS credentials and an empty AWS config (``aws_test_env``), so no test can reach real
AWS or depend on the developer's ``~/.aws``. :func:`moto` and :func:`seaweed` are context
managers that the benchmarks reuse.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulators import Emulator, free_port, port_open, start
from tests.support.rigs import Rig

RIGS: dict[str, str] = {"s3": "rig_s3_moto"}

BUCKET = "gm-tests"
#: Environment for clients of the emulators: dummy credentials, no config files, no IMDS.
AWS_TEST_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": "gm-test-access-key",
    "AWS_SECRET_ACCESS_KEY": "gm-test-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
#: Variables that would redirect or reconfigure clients; removed for the test session.
_AWS_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
_BIN = Path(sys.executable).parent


def _client(endpoint: str) -> Any:
    """A boto3 client for fixtures: one attempt, short timeouts, the dummy credentials."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=AWS_TEST_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
        config=Config(connect_timeout=1, read_timeout=10, retries={"total_max_attempts": 1}),
    )


def make_bucket(endpoint: str, bucket: str = BUCKET) -> None:
    """Create ``bucket`` (if missing) and store one object in it, proving writes work."""
    client = _client(endpoint)
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    client.put_object(Bucket=bucket, Key="ready-probe", Body=b"ok")
    client.delete_object(Bucket=bucket, Key="ready-probe")
    client.close()


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held open together while choosing)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_pair(offset: int, avoid: set[int]) -> int:
    """A free loopback port ``p`` such that ``p + offset`` is free too."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as first:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            if port + offset > 65535 or port in avoid or port + offset in avoid:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as second:
                try:
                    second.bind(("127.0.0.1", port + offset))
                except OSError:
                    continue
                return port
    raise RuntimeError(f"found no free port pair {offset} apart on 127.0.0.1")


@contextlib.contextmanager
def moto(log_dir: Path, bucket: str = BUCKET, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``moto_server`` on a free loopback port with ``bucket``; yield its endpoint.

    ``env`` adds environment variables for the server (e.g. ``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE``).
    """
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    emulator = start(
        "moto",
        [str(_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        port,
        lambda: port_open(port),
        log_dir,
        env=env,
    )
    try:
        make_bucket(endpoint, bucket)
        yield endpoint
    finally:
        emulator.stop()


@contextlib.contextmanager
def seaweed(log_dir: Path, data_dir: Path, bucket: str = BUCKET) -> Iterator[str]:
    """Run SeaweedFS ``weed mini`` on loopback with every port chosen free; yield its S3 endpoint.

    ``weed mini`` runs a master, a volume server, a filer, S3 and an admin server, each with
    an HTTP and a gRPC port; all are chosen free so parallel runs never clash on a
    default port (the admin gRPC port is admin.port + 10000). Ready means one PUT into
    ``bucket`` has succeeded. The dummy credentials are passed to the server, so it checks
    request signatures like real S3.
    """
    names = [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port",
        "s3.port.grpc",
    ]
    ports = dict(zip(names, _free_ports(len(names)), strict=True))
    # The admin server's plug-in worker dials admin.port + 10000 whatever admin.port.grpc
    # says, so leave the gRPC port at its default and pick an admin port where both are free.
    ports["admin.port"] = _port_pair(10000, avoid=set(ports.values()))
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    command = [
        str(_BIN / "weed"),
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-webdav=false",
        "-admin.ui=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]
    server_env = {k: AWS_TEST_ENV[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}

    def ready() -> bool:
        if not port_open(ports["s3.port"]):
            return False
        make_bucket(endpoint, bucket)
        return True

    emulator: Emulator = start(
        "seaweedfs", command, ports["s3.port"], ready, log_dir, timeout=90, env=server_env
    )
    try:
        yield endpoint
    finally:
        emulator.stop()


def s3_rig(name: str, endpoint: str, bucket: str = BUCKET, *, atomic: bool = True) -> Rig:
    """A rig for ``bucket`` at ``endpoint``; worker processes get the endpoint and credentials."""
    return Rig(
        name,
        f"s3://{bucket}",
        options={"endpoint_url": endpoint},
        env={**AWS_TEST_ENV, "AWS_ENDPOINT_URL": endpoint},
        atomic=atomic,
    )


@pytest.fixture(scope="session")
def aws_test_env() -> Iterator[dict[str, str]]:
    """Dummy credentials and no AWS config files for the whole session; restored after."""
    patch = pytest.MonkeyPatch()
    for name in _AWS_UNSET:
        patch.delenv(name, raising=False)
    for name, value in AWS_TEST_ENV.items():
        patch.setenv(name, value)
    try:
        yield dict(AWS_TEST_ENV)
    finally:
        patch.undo()


@pytest.fixture(scope="session")
def moto_endpoint(
    aws_test_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The endpoint of this session's moto_server, which holds :data:`BUCKET`."""
    with moto(tmp_path_factory.mktemp("moto-log")) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def seaweed_endpoint(
    aws_test_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The S3 endpoint of this session's SeaweedFS, which holds :data:`BUCKET`."""
    with seaweed(tmp_path_factory.mktemp("seaweed-log"), tmp_path_factory.mktemp("seaweed")) as ep:
        yield ep


@pytest.fixture(scope="session")
def rig_s3_moto(moto_endpoint: str) -> Rig:
    """S3 on moto_server: the contract matrix's S3 rig (not atomic under races)."""
    return s3_rig("s3", moto_endpoint, atomic=False)


@pytest.fixture(scope="session")
def rig_s3_seaweed(seaweed_endpoint: str) -> Rig:
    """S3 on SeaweedFS: atomic conditional writes, for races."""
    return s3_rig("s3-seaweed", seaweed_endpoint)
