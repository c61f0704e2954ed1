"""Store requests per claimed unit, for 8 learners over 1k, 10k and 100k units on ``file://``.

Each learner is a thread with its own counting wrapper around its own handle on one
``file://`` directory, and a no-op loader (one item per unit), so claiming is all there is.
We count the requests the learners send: conditional creates (``put_if_absent``, won or
lost), reads (the read-back after each won claim), and listings (calls, keys listed, and
pages at 1000 keys per page as S3, GCS and Azure would bill them).

Goal: at most 2 requests per unit on average (the create and its read-back), plus listing,
and a per-unit figure that stays flat as the number of units grows. The last line is the
ratio of total time at 100k units to total time at 10k (10x the units: ideally about 10x).

Run: ``python benchmarks/claim_cost.py [--sizes 1000,10000,100000] [--fsync]``
(``fsync`` is off by default so the figures measure the protocol, not the disk.)
"""

from __future__ import annotations

import argparse
import math
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from gradientmail import Capability, Mailbox, from_url
from gradientmail.patterns.shared_queue import shared_queue

LEARNERS = 8
PAGE = 1000


class CountingMailbox:
    """Counts the requests that reach the store through this handle."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.creates = 0
        self.gets = 0
        self.puts = 0
        self.lists = 0
        self.listed = 0
        self.pages = 0

    @property
    def url(self) -> str:
        return self.inner.url

    def supports(self, capability: Capability) -> bool:
        return self.inner.supports(capability)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.creates += 1
        return self.inner.put_if_absent(key, data)

    def get(self, key: str) -> bytes:
        self.gets += 1
        return self.inner.get(key)

    def put(self, key: str, data: bytes) -> None:
        self.puts += 1
        self.inner.put(key, data)

    def list(self, prefix: str = "") -> Iterator[str]:
        self.lists += 1
        count = 0
        for key in self.inner.list(prefix):
            count += 1
            yield key
        self.listed += count
        self.pages += max(1, math.ceil(count / PAGE))


def run(size: int, fsync: bool) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="gm-claim-cost-")
    url = f"file://{root}?fsync={'true' if fsync else 'false'}"
    units = {f"u{i:07d}": i for i in range(size)}
    boxes = [CountingMailbox(from_url(url)) for _ in range(LEARNERS)]
    claimed = [0] * LEARNERS
    barrier = threading.Barrier(LEARNERS)

    def learner(n: int) -> None:
        barrier.wait()
        with shared_queue(
            units,
            mailbox=boxes[n],  # type: ignore[arg-type]
            learner_id=f"learner-{n}",
            load=lambda unit: (unit,),
        ) as items:
            for _ in items:
                claimed[n] += 1

    threads = [threading.Thread(target=learner, args=(n,)) for n in range(LEARNERS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    assert sum(claimed) == size, (sum(claimed), size)
    creates = sum(b.creates for b in boxes) - LEARNERS  # less one manifest create each
    gets = sum(b.gets for b in boxes)
    return {
        "size": size,
        "seconds": elapsed,
        "creates": creates / size,
        "lost": (creates - size) / size,
        "gets": gets / size,
        "requests": (creates + gets) / size,
        "lists": sum(b.lists for b in boxes),
        "listed": sum(b.listed for b in boxes) / size,
        "pages": sum(b.pages for b in boxes) / size,
        "spread": (min(claimed), max(claimed)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--fsync", action="store_true", help="fsync every claim (slower)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{LEARNERS} learner threads, no-op loader, file:// (fsync {args.fsync})")
    header = (
        f"{'units':>8} {'req/unit':>9} {'create':>7} {'lost':>6} {'read':>6} "
        f"{'listings':>8} {'keys listed/unit':>16} {'pages/unit':>10} {'seconds':>8} "
        f"{'us/unit':>8}  claims per learner"
    )
    print(header)
    results = {}
    for size in sizes:
        r = run(size, args.fsync)
        results[size] = r
        print(
            f"{size:>8} {r['requests']:>9.3f} {r['creates']:>7.3f} {r['lost']:>6.3f} "
            f"{r['gets']:>6.3f} {r['lists']:>8} {r['listed']:>16.2f} {r['pages']:>10.4f} "
            f"{r['seconds']:>8.2f} {r['seconds'] / size * 1e6:>8.1f}  "
            f"{r['spread'][0]}-{r['spread'][1]}"
        )
    print("req/unit = (creates + reads) / units; goal <= 2 plus listing, flat across sizes")
    if 10_000 in results and 100_000 in results:
        ratio = results[100_000]["seconds"] / results[10_000]["seconds"]
        print(f"time at 100k / time at 10k: {ratio:.1f}x (10x the units; linear would be 10x)")


if __name__ == "__main__":
    main()
