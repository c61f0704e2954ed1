"""Resume cost: one learner resumes a 100k-unit run that is 90 % done, through a request counter.

The run is written directly through the mailbox, in the formats a real run leaves behind
(``gradientmail.patterns._claims``, ``unit_claims``, ``progress``, ``leases``): the manifest,
and for every unit whose index is not 9 mod 10 (90 %, interleaved, so no prefix of the
order is all done) a claim in the ``done`` state and its ``done/{id}`` record. The 8
learners of the first run were killed: each still holds one claimed unit that is not done,
and their leases say ``running`` but were last renewed an hour ago. The rest is free.

Then ``learner-0`` starts again, with the same units mapping, through
:class:`claim_cost.CountingMailbox`, and runs to the end with a no-op loader (one item per
unit). It takes back its own unfinished unit first, then the free units, then, having
watched the other seven leases unchanged for a whole lease (``--lease``, 2 s here so that
the run ends soon), their units.

Printed, per 1000 units of the run (pages at 1000 keys, as S3, GCS and Azure bill them):

* **start**: from entering ``shared_queue`` to the first item: the start scan (one
  listing of ``units/`` and one of ``done/``) and anything else before the first item;
* **whole run**: to the end, split into the start scan, refreshes of the local view, and
  the scans taken while waiting with no unit free (the dead learners' units);
* **requests naming a completed unit** (``units/{id}`` or ``done/{id}`` of one of the 90k
  done units), by method. Goal: zero reads (``get`` / ``get_versioned``).

Goal: at most 2.5 listing pages per 1000 units to resume. Baselines measured in the same
run: a bare listing of ``units/`` and ``done/`` (the floor of any resume that lists), and
the same learner running 10k units on an empty prefix (the work left, without a resume).

Run: ``python benchmarks/resume_cost.py [--units 100000] [--lease 2] [--memory]``
(``file://`` with ``fsync=false`` by default; ``--memory`` uses ``memory://`` instead.)
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from claim_cost import PAGE, CountingMailbox

from gradientmail import Mailbox, from_url
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.patterns._claims import claim_body, new_token
from gradientmail.patterns._leases import Lease
from gradientmail.patterns._run_layout import LEASES_PREFIX, RunLayout, check_manifest
from gradientmail.patterns.shared_queue import shared_queue
from gradientmail.patterns.shared_queue._unit_claims import CLAIMED, DONE

OLD_LEARNERS = 8
RESUMER = "learner-0"


def identifiers(size: int) -> dict[str, int]:
    return {f"u{i:07d}": i for i in range(size)}


def build(box: Mailbox, size: int, lease: float) -> tuple[set[str], set[str]]:
    """Write a killed run's leftovers; return (done units, units still claimed)."""
    units = identifiers(size)
    check_manifest(box, list(units))
    layout = RunLayout()
    done = {ident for ident, i in units.items() if i % 10 != 9}
    free = [ident for ident in units if ident not in done]
    open_claims = {free[k * (len(free) // OLD_LEARNERS)]: k for k in range(OLD_LEARNERS)}

    def write_done(ident: str) -> None:
        owner = f"learner-{units[ident] % OLD_LEARNERS}"
        extra = {"incarnation": 1, "state": DONE, "previous": []}
        box.put_if_absent(layout.units + ident, claim_body(owner, new_token(), **extra))
        box.put_if_absent(layout.done + ident, encode_record({"by": owner, "at": time.time()}))

    with ThreadPoolExecutor(4) as pool:
        for _ in pool.map(write_done, sorted(done), chunksize=256):
            pass
    for ident, k in open_claims.items():
        extra = {"incarnation": 1, "state": CLAIMED, "previous": []}
        box.put_if_absent(layout.units + ident, claim_body(f"learner-{k}", new_token(), **extra))
    for k in range(OLD_LEARNERS):
        key = LEASES_PREFIX + f"learner-{k}"
        Lease(box, key, f"learner-{k}", duration=lease).acquire()
        data, version = box.get_versioned(key)
        record = decode_record(data) or {}
        record["renewed_at"] = float(record.get("renewed_at") or time.time()) - 3600
        box.put_if_match(key, encode_record(record), version)
    return done, set(open_claims)


def pages(listings: list[tuple[str, int]]) -> int:
    return sum(max(1, math.ceil(keys / PAGE)) for _, keys in listings)


def resume(url: str, size: int, done: set[str], lease: float) -> dict[str, Any]:
    box = CountingMailbox(from_url(url), watched=done)
    units = identifiers(size)
    first: dict[str, Any] = {}
    began = time.perf_counter()
    items = 0
    with shared_queue(
        units,
        mailbox=box,
        learner_id=RESUMER,
        load=lambda unit: (unit,),
        lease=lease,
    ) as queue:
        for _ in queue:
            if not items:
                first = {
                    "seconds": time.perf_counter() - began,
                    "listings": list(box.listings),
                    "requests": Counter(box.requests),
                }
            items += 1
    total = time.perf_counter() - began
    claiming, waiting = box.pages()
    start_scan = pages(box.listings[:2])
    return {
        "items": items,
        "seconds": total,
        "first": first,
        "pages": pages(box.listings),
        "start_scan": start_scan,
        "refresh": claiming - start_scan,
        "waiting": waiting,
        "touched": Counter(box.touched),
        "stats": queue.stats,
        "requests": box.requests,
    }


def fresh(url: str, size: int, lease: float) -> float:
    began = time.perf_counter()
    with shared_queue(
        identifiers(size),
        mailbox=from_url(url),
        learner_id=RESUMER,
        load=lambda unit: (unit,),
        lease=lease,
    ) as queue:
        for _ in queue:
            pass
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=100_000)
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds")
    parser.add_argument("--memory", action="store_true", help="memory:// instead of file://")
    args = parser.parse_args()
    roots: list[str] = []

    def new_url(name: str) -> str:
        if args.memory:
            return f"memory://resume-cost-{name}-{time.time_ns()}"
        roots.append(tempfile.mkdtemp(prefix=f"gm-resume-{name}-"))
        return f"file://{roots[-1]}?fsync=false"

    try:
        report(args, new_url)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def report(args: argparse.Namespace, new_url: Callable[[str], str]) -> None:
    """Build the run, resume it, run the baselines, and print the figures."""
    size = args.units

    url = new_url("run")
    store = from_url(url)
    began = time.perf_counter()
    done, open_claims = build(store, size, args.lease)
    print(
        f"{store.url.split('?')[0].split(':')[0]}://: built a run of {size} units, "
        f"{len(done)} done, {len(open_claims)} claimed by {OLD_LEARNERS} killed learners, "
        f"in {time.perf_counter() - began:.1f} s; lease {args.lease:g} s"
    )
    began = time.perf_counter()
    listed = sum(1 for _ in store.list("units/")) + sum(1 for _ in store.list("done/"))
    bare = time.perf_counter() - began
    r = resume(url, size, done, args.lease)
    left = size - len(done)
    base = fresh(new_url("fresh"), left, args.lease)
    per = 1000 / size
    first = r["first"]
    print(f"{RESUMER} resumed and ran {r['items']} units (expected {left})")
    print(
        f"  start (to the first item): {first['seconds']:.3f} s, "
        f"{pages(first['listings']) * per:.2f} pages per 1000 units "
        f"({len(first['listings'])} listings); bare listing of units/ and done/ ({listed} "
        f"keys): {bare:.3f} s, ratio {first['seconds'] / bare:.2f}x"
    )
    print(
        f"  whole run: {r['seconds']:.2f} s; {r['pages'] * per:.2f} pages per 1000 units = "
        f"start scan {r['start_scan'] * per:.2f} + refreshes {r['refresh'] * per:.2f} + "
        f"waiting scans {r['waiting'] * per:.2f} ({r['stats'].cost.wait_scans} scans)"
    )
    print(
        f"  fresh run of the {left} units left, same learner, empty prefix: {base:.2f} s; "
        f"resumed / fresh: {r['seconds'] / base:.2f}x (the resumed run also watches the dead "
        f"learners' leases for {args.lease:g} s before taking their {len(open_claims) - 1} "
        "units)"
    )
    touched = r["touched"]
    reads = touched["get"] + touched["get_versioned"]
    first_reads = {
        f"{m} {kind}": n
        for (m, kind), n in sorted(first["requests"].items())
        if m in ("get", "get_versioned")
    }
    print(
        f"  requests naming a completed unit: {dict(touched) or 'none'}; reads {reads} "
        f"(goal 0: {'met' if reads == 0 else 'MISSED'}); reads before the first item: "
        f"{first_reads}"
    )
    verdict = "met" if pages(first["listings"]) * per <= 2.5 else "MISSED"
    print(
        f"resume: {pages(first['listings']) * per:.2f} listing pages per 1000 units "
        f"(goal <= 2.5: {verdict}); whole resumed run {r['pages'] * per:.2f}"
    )
    stats = r["stats"]
    print(
        f"  queue.stats: done before {stats.units_done_before}, claimed {stats.units_claimed}, "
        f"reclaimed {stats.units_reclaimed}, completed {stats.units_completed}, "
        f"run complete {stats.run_complete}"
    )


if __name__ == "__main__":
    main()
