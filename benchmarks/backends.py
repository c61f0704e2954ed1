"""put_if_absent on each cloud backend against its emulator, and the raw SDK call beneath it.

For every backend whose module and emulator are available (S3 on moto and on SeaweedFS, GCS
on fake-gcs-server, Azure on Azurite), this starts the emulator on loopback, then measures
fresh-key ``put_if_absent`` calls, uncontended, with 1 thread and with 8 threads sharing one
mailbox:

* latency p50 and p99 (milliseconds per call) and throughput (calls per second);
* the same for a raw loop of the same SDK call with the same conditional header, without
  gradientmail: S3 ``put_object(IfNoneMatch="*")`` on a client with the backend's exact
  botocore Config; GCS ``upload_from_string(if_generation_match=0, retry=None)``; Azure
  ``upload_blob(overwrite=False)`` (``If-None-Match: *``) with SDK retries off, as the
  backends configure them.

Ours and raw alternate in short rounds (``--calls`` calls per thread each), so both see the
same machine noise; p50 and p99 are over all calls, throughput the median over rounds.
"cpu ms" is this process's CPU time per call (the emulator runs in another process): the
least noisy view of what our layer itself costs on a shared machine. The ratios are
ours/raw for p50 and CPU, raw/ours for throughput, each the median over back-to-back pairs
of rounds, so 1.00 means no overhead and 1.10 means 10 % slower.

What our layer adds per call: key validation, a write id, the write-id metadata header,
the retry/lost-response wrapper, and on S3 a botocore event hook counting attempts.

Usage: python benchmarks/backends.py [--calls 10] [--rounds 40] [--threads 1,8]
       [--only s3-moto,s3-seaweedfs,gcs,azure]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.emulators

from gradientmail import from_url
from tests.support.emulators import TOOLS_DIR, free_port, port_open, start

VALUE = b"learner-0 claims this unit" + b"." * 38  # a typical 64-byte claim body
Op = Callable[[str], None]


@dataclass
class Target:
    """One backend on one emulator: how to start it and how to make each kind of loop."""

    name: str
    #: Context manager yielding (make_ours, make_raw); each makes an Op under a fresh prefix
    #: (one mailbox or one SDK client, shared by all threads and rounds).
    setup: Callable[
        [Path], contextlib.AbstractContextManager[tuple[Callable[[str], Op], Callable[[str], Op]]]
    ]


# -- S3 --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _s3(kind: str, workdir: Path) -> Iterator[tuple[Callable[[str], Op], Callable[[str], Op]]]:
    from gradientmail.backends._s3_client import new_client
    from tests.support.emulators import s3

    os.environ.update(s3.AWS_TEST_ENV)
    server = s3.moto(workdir) if kind == "moto" else s3.seaweed(workdir, workdir / "data")
    with server as endpoint:

        def ours(prefix: str) -> Op:
            box = from_url(f"s3://{s3.BUCKET}/{prefix}", endpoint_url=endpoint)

            def op(key: str) -> None:
                if not box.put_if_absent(key, VALUE):
                    raise AssertionError(f"{key} already existed")

            return op

        def raw(prefix: str) -> Op:
            # the backend's exact client configuration
            client = new_client({"endpoint_url": endpoint}, ("endpoint_url",))

            def op(key: str) -> None:
                client.put_object(
                    Bucket=s3.BUCKET, Key=f"{prefix}/{key}", Body=VALUE, IfNoneMatch="*"
                )

            return op

        yield ours, raw


# -- GCS -------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _gcs(workdir: Path) -> Iterator[tuple[Callable[[str], Op], Callable[[str], Op]]]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.support.emulators import gcs

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [
        gcs._binary(),
        *("-scheme", "http", "-host", "127.0.0.1", "-port", str(port)),
        *("-backend", "memory", "-external-url", endpoint, "-log-level", "warn"),
    ]
    emulator = start("fake-gcs-server", command, port, lambda: gcs._answers(endpoint), workdir)
    try:
        gcs.create_bucket(endpoint, gcs.BUCKET)

        def ours(prefix: str) -> Op:
            box = from_url(f"gs://{gcs.BUCKET}/{prefix}", emulator_host=endpoint)

            def op(key: str) -> None:
                if not box.put_if_absent(key, VALUE):
                    raise AssertionError(f"{key} already existed")

            return op

        def raw(prefix: str) -> Op:
            client = storage.Client(
                project="test",
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options={"api_endpoint": endpoint},
            )
            # As the backend does: no background bucket-metadata fetches.
            if getattr(client, "_bucket_metadata_cache", None) is not None:
                client._bucket_metadata_cache = None
            bucket = client.bucket(gcs.BUCKET)

            def op(key: str) -> None:
                bucket.blob(f"{prefix}/{key}").upload_from_string(
                    VALUE,
                    content_type="application/octet-stream",
                    if_generation_match=0,
                    retry=None,
                )

            return op

        yield ours, raw
    finally:
        emulator.stop()


# -- Azure -----------------------------------------------------------------------------------------

_AZURITE = TOOLS_DIR / "node_modules" / ".bin" / "azurite-blob"


@contextlib.contextmanager
def _azure(workdir: Path) -> Iterator[tuple[Callable[[str], Op], Callable[[str], Op]]]:
    from azure.storage.blob import ContainerClient

    from tests.support.emulators import azure

    port = free_port()
    command = [
        str(_AZURITE),
        *("--blobHost", "127.0.0.1", "--blobPort", str(port)),
        *("--inMemoryPersistence", "--disableTelemetry", "--silent", "--skipApiVersionCheck"),
    ]
    emulator = start("azurite", command, port, lambda: port_open(port), workdir)
    try:
        secret = azure.connection_string(f"http://127.0.0.1:{port}")
        ContainerClient.from_connection_string(secret, azure.CONTAINER).create_container()

        def ours(prefix: str) -> Op:
            box = from_url(f"az://{azure.CONTAINER}/{prefix}", connection_string=secret)

            def op(key: str) -> None:
                if not box.put_if_absent(key, VALUE):
                    raise AssertionError(f"{key} already existed")

            return op

        def raw(prefix: str) -> Op:
            container = ContainerClient.from_connection_string(
                secret, azure.CONTAINER, retry_total=0
            )

            def op(key: str) -> None:
                container.upload_blob(f"{prefix}/{key}", VALUE, overwrite=False)

            return op

        yield ours, raw
    finally:
        emulator.stop()


def _targets() -> list[Target]:
    targets = [
        Target("s3-moto", lambda d: _s3("moto", d)),
        Target("s3-seaweedfs", lambda d: _s3("seaweed", d)),
    ]
    if importlib.util.find_spec("gradientmail.backends.gcs") is not None:
        targets.append(Target("gcs", _gcs))
    if importlib.util.find_spec("gradientmail.backends.azure") is not None:
        if _AZURITE.exists():
            targets.append(Target("azure", _azure))
        else:
            print(f"azure: skipped, {_AZURITE} is missing (make .emulators/...azurite-blob)")
    return targets


# -- measuring -------------------------------------------------------------------------------------


@dataclass
class Sample:
    latencies: list[float]  # seconds per call
    wall: float  # seconds for all calls
    cpu: float  # this process's CPU seconds for all calls (the emulator runs elsewhere)

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.wall


def _measure(op: Op, round_name: str, calls: int, threads: int) -> Sample:
    """``calls`` fresh-key calls per thread, by ``threads`` threads sharing one Op."""
    barrier = threading.Barrier(threads + 1)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        mine = latencies[index]
        barrier.wait()
        try:
            for n in range(index, calls * threads, threads):
                key = f"{round_name}/u{n:07d}"
                began = time.perf_counter()
                op(key)
                mine.append(time.perf_counter() - began)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    began, cpu_began = time.perf_counter(), time.process_time()
    for thread in pool:
        thread.join()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    if errors:
        raise errors[0]
    return Sample([x for part in latencies for x in part], wall, cpu)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(samples: list[Sample]) -> tuple[float, float, float, float]:
    """(p50 ms, p99 ms, calls/s, client CPU ms per call).

    Latency quantiles are over every call of every round; throughput and CPU per call are
    medians over rounds.
    """
    latencies = [x for s in samples for x in s.latencies]
    p50, p99 = _quantile(latencies, 0.50) * 1000, _quantile(latencies, 0.99) * 1000
    rate = statistics.median(s.rate for s in samples)
    cpu = statistics.median(s.cpu / len(s.latencies) for s in samples) * 1000
    return p50, p99, rate, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10, help="calls per thread per round")
    parser.add_argument("--rounds", type=int, default=40, help="alternating rounds per figure")
    parser.add_argument("--threads", default="1,8", help="thread counts, comma-separated")
    parser.add_argument("--only", default="", help="comma-separated target names")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    thread_counts = [int(t) for t in args.threads.split(",")]

    header = (
        f"{'backend':<14}{'threads':>8}  {'layer':<5}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'calls/s':>9}{'cpu ms':>8}"
    )
    print(f"{header}   ratios p50 / throughput / cpu (1.00 = no overhead)")
    worst: list[tuple[float, str]] = []
    for target in _targets():
        if only and target.name not in only:
            continue
        with tempfile.TemporaryDirectory(prefix=f"gm-bench-{target.name}-") as tmp:
            try:
                with target.setup(Path(tmp)) as (ours, raw):
                    for threads in thread_counts:
                        worst.append(_compare(target.name, ours, raw, threads, args))
            except Exception as exc:  # noqa: BLE001 - one backend failing must not hide the rest
                print(f"{target.name}: failed: {type(exc).__name__}: {exc}")
    if worst:
        ratio, where = max(worst)
        verdict = "within" if ratio <= 1.10 else "OVER"
        print(
            f"\nworst overhead on p50 or throughput: {ratio:.2f}x at {where} "
            f"({verdict} the 10 % goal)"
        )


def _compare(
    name: str, ours: Callable[[str], Op], raw: Callable[[str], Op], threads: int, args: Any
) -> tuple[float, str]:
    """Measure both layers in alternating rounds; print two rows; return the worst ratio."""
    ops = {
        "raw": raw(f"bench-{uuid.uuid4().hex[:10]}"),
        "ours": ours(f"bench-{uuid.uuid4().hex[:10]}"),
    }
    for layer, op in ops.items():  # connections and lazy imports before the clock starts
        for i in range(max(5, threads)):
            op(f"warmup/{layer}-{threads}-{i}")
    results: dict[str, list[Sample]] = {"raw": [], "ours": []}
    for round_number in range(args.rounds):
        order = ["raw", "ours"] if round_number % 2 == 0 else ["ours", "raw"]
        for layer in order:
            round_name = f"t{threads}r{round_number}"
            results[layer].append(_measure(ops[layer], round_name, args.calls, threads))
    raw_s, ours_s = _summary(results["raw"]), _summary(results["ours"])
    # Ratios are medians over the rounds' pairs (each pair ran back to back), so that load
    # from other processes drifting during the run cancels out.
    pairs = list(zip(results["raw"], results["ours"], strict=True))
    ratios = (
        statistics.median(
            _quantile(o.latencies, 0.5) / _quantile(r.latencies, 0.5) for r, o in pairs
        ),
        statistics.median(r.rate / o.rate for r, o in pairs),
        statistics.median(
            (o.cpu / len(o.latencies)) / (r.cpu / len(r.latencies)) for r, o in pairs
        ),
    )
    for layer, (p50, p99, rate, cpu) in (("raw", raw_s), ("ours", ours_s)):
        row = f"{name:<14}{threads:>8}  {layer:<5}{p50:>8.2f}{p99:>8.2f}{rate:>9.0f}{cpu:>8.2f}"
        if layer == "ours":
            row += "   " + " / ".join(f"{r:.2f}" for r in ratios)
        print(row, flush=True)
    return max(ratios[0], ratios[1]), f"{name} x{threads}"


if __name__ == "__main__":
    main()
