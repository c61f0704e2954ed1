"""put_if_absent throughput on file:// against the raw floor of a bare O_CREAT|O_EXCL loop.

For 1, 4 and 16 processes, 20,000 fresh keys are split evenly between the processes; each
process creates its share as fast as it can, after a start barrier. The floor does the same
with ``os.open(path, O_CREAT|O_EXCL|O_WRONLY)`` + write + close into one flat directory, with
no staging, no fsync and no key encoding. Both run in this process's run, on the same
filesystem, so the ratio (ours / floor) is meaningful on a noisy machine.

file:// is measured twice: with ``fsync=true`` (the default: a value and its directory are
durable before the key is visible) and ``fsync=false`` (process-crash safe only).

Usage: python benchmarks/claims.py [--keys 20000] [--procs 1,4,16] [--dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from typing import Any

from gradientmail import from_url

VALUE = b"learner-0 claims this unit" + b"." * 38  # a typical 64-byte claim body


def _ours(url: str, keys: list[str], barrier: Any, out: Any) -> None:
    box = from_url(url)
    box.put_if_absent("warmup/" + keys[0], VALUE)  # open descriptors before the clock starts
    barrier.wait()
    start = time.perf_counter()
    for key in keys:
        if not box.put_if_absent(key, VALUE):
            raise AssertionError(f"{key} already existed")
    out.put(time.perf_counter() - start)


def _floor(directory: str, keys: list[str], barrier: Any, out: Any) -> None:
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    barrier.wait()
    start = time.perf_counter()
    for key in keys:
        fd = os.open(os.path.join(directory, key.replace("/", "_")), flags, 0o644)
        os.write(fd, VALUE)
        os.close(fd)
    out.put(time.perf_counter() - start)


def _run(target: Any, where: str, total: int, procs: int) -> float:
    """Wall time of the slowest process to create its share of ``total`` keys."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    shares = [[f"units/u{i:07d}" for i in range(p, total, procs)] for p in range(procs)]
    workers = [ctx.Process(target=target, args=(where, s, barrier, out)) for s in shares]
    for w in workers:
        w.start()
    times = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise RuntimeError(f"a worker failed with exit code {w.exitcode}")
    return float(max(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--procs", default="1,4,16")
    parser.add_argument("--dir", default=None, help="where to create files (default: a temp dir)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="gm-claims-", dir=args.dir)
    print(f"put_if_absent on file:// vs bare O_CREAT|O_EXCL, {args.keys} fresh keys, in {base}")
    print(
        f"{'procs':>5} {'floor/s':>10} {'fsync=false/s':>14} {'ratio':>6} "
        f"{'fsync=true/s':>13} {'ratio':>6}"
    )
    try:
        for procs in (int(p) for p in args.procs.split(",")):
            rates = {}
            for label in ("floor", "nofsync", "fsync"):
                where = os.path.join(base, f"{label}-{procs}")
                os.makedirs(where)
                if label == "floor":
                    elapsed = _run(_floor, where, args.keys, procs)
                else:
                    url = f"file://{where}?fsync={'true' if label == 'fsync' else 'false'}"
                    elapsed = _run(_ours, url, args.keys, procs)
                rates[label] = args.keys / elapsed
                shutil.rmtree(where)
            print(
                f"{procs:>5} {rates['floor']:>10,.0f} {rates['nofsync']:>14,.0f} "
                f"{rates['nofsync'] / rates['floor']:>6.2f} {rates['fsync']:>13,.0f} "
                f"{rates['fsync'] / rates['floor']:>6.2f}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
