"""Embarrassingly parallel preprocessing over a shared queue: fast workers take more shards.

    python examples/preprocess.py            # a few seconds; no torch, no network

It writes 42 shards of synthetic text, then starts three worker processes slowed 1x, 2x and
4x (stand-ins for unequal machines). Each tokenises the shards it claims into
``out/{shard}.tok``. Nobody knows anyone's speed: a worker claims the next free shard
whenever it is ready, so the fast one ends with about four times the shards of the slow one
and all three finish together. This is where a shared queue buys speed: independent work
(tokenising, encoding, embedding, inference, evaluation), with no lockstep between workers.

Each worker is what you would run once per machine, or per task of a SLURM job array::

    box = gradientmail.from_url(URL)
    name = gradientmail.learner_id()        # slurm{job}-rank{task}, a pod name, or host-pid
    with gradientmail.Session(box, name), shared_queue(shards, mailbox=box, learner_id=name,
                                                       load=lambda p: [p], prefetch=1) as paths:
        for path in paths:
            tokenise(path)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import tempfile
import time
import zlib
from array import array
from pathlib import Path
from typing import Any

import gradientmail
from gradientmail.patterns.shared_queue import shared_queue

WORDS = [f"w{i}" for i in range(500)]


def write_shards(root: Path, count: int, lines: int) -> dict[str, str]:
    """``count`` text files of ``lines`` lines each; identifier -> path."""
    root.mkdir(parents=True)
    rng = random.Random(0)
    shards = {}
    for n in range(count):
        path = root / f"shard-{n:03d}.txt"
        text = "\n".join(" ".join(rng.choices(WORDS, k=12)) for _ in range(lines))
        path.write_text(text)
        shards[path.stem] = str(path)
    return shards


def tokenise(path: str, out: Path, seconds: float) -> int:
    """Write the shard's token ids (a 16-bit hash of each word); return how many."""
    began = time.perf_counter()
    tokens = array("H", (zlib.crc32(w.encode()) & 0xFFFF for w in Path(path).read_text().split()))
    (out / (Path(path).stem + ".tok")).write_bytes(tokens.tobytes())
    time.sleep(max(0.0, seconds - (time.perf_counter() - began)))  # this machine's pace
    return len(tokens)


def worker(url: str, shards: dict[str, str], out: str, seconds: float, start: Any) -> dict:
    box = gradientmail.from_url(url)
    name = gradientmail.learner_id()
    start.wait()
    done, tokens = 0, 0
    # A shard is one item here, so prefetch=1: claim the next shard only when nearly ready
    # for it (the default, 8 items ahead, would let a slow worker hoard 8 shards).
    with (
        gradientmail.Session(box, name, publish_every=1.0) as session,
        shared_queue(shards, mailbox=box, learner_id=name, load=lambda p: [p], prefetch=1) as paths,
    ):
        for path in paths:
            tokens += tokenise(path, Path(out), seconds)
            done += 1
            session.step(samples=1)
    return {"name": name, "shards": done, "tokens": tokens, "end": time.time()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="the run's mailbox (default: a new file:// directory)")
    parser.add_argument("--shards", type=int, default=42)
    parser.add_argument("--slowdowns", default="1,2,4", help="one per worker (default 1,2,4)")
    parser.add_argument("--shard-ms", type=float, default=100.0, help="the fastest's ms per shard")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gm-preprocess-"))
    url = args.url or f"file://{work / 'run'}"
    shards = write_shards(work / "text", args.shards, lines=200)
    (work / "out").mkdir()
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    ctx = mp.get_context("spawn")
    start = ctx.Manager().Barrier(len(slowdowns) + 1)
    with ctx.Pool(len(slowdowns)) as pool:
        jobs = [
            pool.apply_async(
                worker, (url, shards, str(work / "out"), args.shard_ms / 1000 * s, start)
            )
            for s in slowdowns
        ]
        start.wait()
        began = time.time()
        results = [job.get(timeout=600) for job in jobs]
    makespan = max(r["end"] for r in results) - began
    print(f"{'worker':<24} {'slowdown':>8} {'shards':>6} {'tokens':>8}")
    for slowdown, r in zip(slowdowns, results, strict=True):
        print(f"{r['name']:<24} {slowdown:>7g}x {r['shards']:>6} {r['tokens']:>8}")
    written = sorted(p.stem for p in (work / "out").glob("*.tok"))
    once = written == sorted(shards) and sum(r["shards"] for r in results) == len(shards)
    print(f"{len(written)} of {len(shards)} shards tokenised, each exactly once: {once}")
    fixed = max(slowdowns) * args.shard_ms / 1000 * len(shards) / len(slowdowns)
    print(f"makespan {makespan:.1f}s; an even split would take at least {fixed:.1f}s")
    print(f"see the run: gradientmail status {url}")


if __name__ == "__main__":
    main()
