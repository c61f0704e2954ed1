"""The exchange on ``file://``: how long a learner holds a lock, and what a sweep lists.

Two figures for the file store under the exchange (issue 49, items 14 and 15), each beside a
baseline measured in the same run:

* **locks**: ``--learners`` learner processes train one shared model through
  ``gradientmail.torch.Exchange`` (``every=1``, a model of ``--params`` fp32 values cut
  into fragments of ``--fragment-kib``, ``--step-ms`` of compute a step) on a ``file://``
  store for ``--seconds``. Each learner times how long it holds a key's lock stripe (from
  taking the ``flock`` to letting go) and how long it spends in deletes, and prints them
  as shares of its wall time. A process stopped while it holds a stripe stalls every
  learner whose swap (or, before, delete) falls on that stripe; stopped anywhere else it
  stalls no one. The baseline is the same run with each delete holding its key's stripe,
  as deletes did before.
* **sweep**: one writer writes ``--versions`` versions (each a list, default 1,000, 10,000
  and 40,000) through the shared model's store as exchanges do (fragments, a head swap,
  the collection of the version that left the history, every 16th version a sweep), then
  the sweep's listing of the model's ``data/`` is timed (median of 20), with the folders
  counted. The baseline is the same store with the empty folder each version left behind
  before, one per version ever written.

Run: ``python benchmarks/file_store.py [--part locks|sweep|both]`` (about 2 minutes; the
stores go to ``/dev/shm`` where there is one, or ``--dir``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support

import torch

import gradientmail
from gradientmail.backends import _local_root
from gradientmail.backends.local import FileMailbox

CTX = mp.get_context("spawn")


# -- locks ------------------------------------------------------------------------------------


def _timed_locks(held: list[float], deletes: list[float], lock_deletes: bool) -> None:
    """Time every lock stripe held, and every delete, in this process (``held``, ``deletes``:
    one-element accumulators); with ``lock_deletes``, deletes hold their key's stripe."""
    locked = _local_root.RootDirectory.locked
    delete = FileMailbox._delete

    @contextmanager
    def timed(self: Any, key: str) -> Iterator[None]:
        with locked(self, key):
            began = time.perf_counter()
            try:
                yield
            finally:
                held[0] += time.perf_counter() - began

    def timed_delete(self: FileMailbox, key: str) -> None:
        began = time.perf_counter()
        try:
            if lock_deletes:
                with self._dir.locked(key):
                    delete(self, key)
            else:
                delete(self, key)
        finally:
            deletes[0] += time.perf_counter() - began

    _local_root.RootDirectory.locked = timed  # type: ignore[method-assign]
    FileMailbox._delete = timed_delete  # type: ignore[method-assign]


def learner(cfg: dict[str, Any], name: str, lock_deletes: bool, start: Any, out: Any) -> None:
    from gradientmail.torch import Exchange

    torch.set_num_threads(1)
    held, deletes = [0.0], [0.0]
    _timed_locks(held, deletes, lock_deletes)
    box = gradientmail.from_url(cfg["url"])
    model = torch.nn.Linear(cfg["params"], 1, bias=False)
    start.wait()
    began = time.perf_counter()
    with Exchange(
        model, mailbox=box, learner_id=name, every=1, fragment_bytes=cfg["fragment"]
    ) as exchange:
        while time.perf_counter() - began < cfg["seconds"]:
            with torch.no_grad():
                model.weight.add_(torch.randn_like(model.weight), alpha=1e-3)
            exchange.step()
            time.sleep(cfg["step_s"])  # this learner's compute, paced
    wall = time.perf_counter() - began
    out.put((held[0] / wall, deletes[0] / wall, exchange.stats.exchanges))


def measure_locks(args: argparse.Namespace, lock_deletes: bool) -> tuple[float, float, float]:
    """Mean share of wall time holding a stripe, and in deletes, and exchanges per learner."""
    root = tempfile.mkdtemp(prefix="gm-locks-", dir=args.dir)
    try:
        cfg = {
            "url": f"file://{root}",
            "params": args.params,
            "fragment": args.fragment_kib * 1024,
            "seconds": args.seconds,
            "step_s": args.step_ms / 1000,
        }
        start, out = CTX.Barrier(args.learners), CTX.Queue()
        procs = [
            CTX.Process(target=learner, args=(cfg, f"l{i}", lock_deletes, start, out))
            for i in range(args.learners)
        ]
        for proc in procs:
            proc.start()
        results = [out.get(timeout=args.seconds + 300) for _ in procs]
        for proc in procs:
            proc.join()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    held, deleting, exchanges = zip(*results, strict=True)
    return statistics.fmean(held), statistics.fmean(deleting), statistics.fmean(exchanges)


def report_locks(args: argparse.Namespace) -> None:
    fragments = -(-args.params * 4 // (args.fragment_kib * 1024))
    print(
        f"locks: {args.learners} learners, every=1, {args.params:,} fp32 values in "
        f"{fragments} fragments, {args.step_ms:g} ms a step, {args.seconds:g} s, {args.dir}"
    )
    print(f"{'deletes':<22} {'holds a stripe':>15} {'in deletes':>11} {'exchanges':>10}")
    rows = {}
    for label, lock_deletes in (("take no lock (now)", False), ("lock a stripe (before)", True)):
        held, deleting, exchanges = rows[label] = measure_locks(args, lock_deletes)
        print(f"{label:<22} {held:>14.1%} {deleting:>10.1%} {exchanges:>10.0f}")
    now, before = rows["take no lock (now)"][0], rows["lock a stripe (before)"][0]
    print(f"share of time holding a stripe, now / before: {now / before:.2f}")


# -- sweep ------------------------------------------------------------------------------------


def _listing_ms(box: FileMailbox, prefix: str) -> float:
    times = []
    for _ in range(20):
        began = time.perf_counter()
        list(box.list(prefix))
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def _folders(root: str) -> int:
    return sum(len(folders) for _, folders, _ in os.walk(root))


def report_sweep(args: argparse.Namespace) -> None:
    from tests.support.exchange_versions import shared_store, write_versions

    print(f"\nsweep: the listing of data/ after N versions, 1 writer, keep=3, {args.dir}")
    print(f"{'versions':>9} {'folders':>8} {'list ms':>8} {'folders before':>15} {'list ms':>8}")
    for versions in args.versions:
        root = tempfile.mkdtemp(prefix="gm-sweep-", dir=args.dir)
        try:
            box = FileMailbox(root, fsync=False)
            store = shared_store(box, keep=3)
            write_versions(store, versions)
            folders, now = _folders(root), _listing_ms(box, store.keys.data)
            data = Path(root, "exchange.d", "model.d", "data.d")
            for version in range(versions):  # what each version left behind before
                (data / f"{version:012d}-leftover.d").mkdir()
            before_folders, before = _folders(root), _listing_ms(box, store.keys.data)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{versions:>9,} {folders:>8} {now:>8.2f} {before_folders:>15,} {before:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["locks", "sweep", "both"], default="both")
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    parser.add_argument("--dir", default=shm, help="where the stores go")
    parser.add_argument("--learners", type=int, default=4)
    parser.add_argument("--params", type=int, default=1_000_000)
    parser.add_argument("--fragment-kib", type=int, default=256)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--versions", type=lambda s: [int(v) for v in s.split(",")], default=[1000, 10000, 40000]
    )
    args = parser.parse_args()
    if args.part in ("locks", "both"):
        report_locks(args)
    if args.part in ("sweep", "both"):
        report_sweep(args)


if __name__ == "__main__":
    main()
