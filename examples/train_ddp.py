"""One model, trained data-parallel (DDP) by every rank, over a shared queue: no hang at the end.

    torchrun --standalone --nproc-per-node 2 examples/train_ddp.py      # CPU and gloo

Every rank reads its batches from a ``SharedQueueDataset``: the ranks' DataLoader workers
share the shards through the mailbox, so each shard is trained exactly once per epoch,
whichever rank gets it. Shards hold different numbers of batches, so the ranks end an epoch
with different step counts. Plain DDP would then hang: the rank with one batch more waits
in its all-reduce for a rank that has left the loop. ``model.join()`` makes the rank that
runs out first shadow the others' all-reduces until every rank is done, and then syncs the
final parameters, so every rank ends with the same model.

Rank 1 is slowed 3x. Under lockstep DDP every step waits for the slowest rank, so both ranks
train at its pace and take about the same number of shards: the shared queue buys exactly
once, resume and no rank idle at the end of an epoch, not speed from unequal machines.

``--out DIR`` writes each rank's trained batches and final parameters to ``DIR/rank{r}.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gradientmail
from gradientmail.torch import SharedQueueDataset, SharedQueueLoader


def load_shard(index: int) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """A shard's batches: ``1 + index % 3`` of them, so the ranks' step counts differ."""
    generator = torch.Generator().manual_seed(index)
    for batch in range(1 + index % 3):
        x = torch.randn(16, 8, generator=generator)
        yield index, batch, x, x.sum(dim=1, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        help="the run's mailbox (default: a file:// directory named by the torchrun run id)",
    )
    parser.add_argument("--shards", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank")
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--step-ms", type=float, default=20.0, help="a fast rank's ms per step")
    parser.add_argument("--out", help="write DIR/rank{r}.json: trained batches and parameters")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # Every rank must open the same run. The URL is agreed without a collective: torchrun
    # gives every rank of one job the same run id (see "Ending a DDP script" in
    # docs/training.md for why this script makes no collective of its own).
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID")
    if run_id is None and args.url is None:
        parser.error("outside torchrun (TORCHELASTIC_RUN_ID) or SLURM, pass --url")
    run_id = run_id or "run"
    url = args.url or f"file://{Path(tempfile.gettempdir(), f'gm-ddp-{run_id}')}"
    box = gradientmail.from_url(url)

    shards = {f"shard-{i:03d}": i for i in range(args.shards)}
    # A small prefetch: at the end of an epoch the ranks differ by what they claimed ahead.
    dataset = SharedQueueDataset(shards, mailbox=box, load=load_shard, shuffle=0, prefetch=2)
    loader = SharedQueueLoader(dataset, batch_size=None, num_workers=args.workers)
    torch.manual_seed(0)  # the same initial model on every rank
    model = DistributedDataParallel(nn.Linear(8, 1))
    # Plain SGD keeps no state, so a rank that joined early, and skipped the last steps,
    # has no stale optimizer state in the next epoch (see docs/training.md).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step_s = args.step_ms / 1000 * (3 if rank == args.slow_rank else 1)
    trained = []
    loss = torch.zeros(())
    with gradientmail.Session(box, gradientmail.learner_id()) as session:
        for epoch in range(args.epochs):
            dataset.set_epoch(epoch)
            with model.join():  # no hang when this rank runs out of batches first
                for shard, batch, x, y in session.timed(loader):
                    began = time.perf_counter()
                    loss = nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    time.sleep(max(0.0, step_s - (time.perf_counter() - began)))  # slow GPU
                    trained.append((epoch, int(shard), int(batch)))
                    session.step(samples=len(x))
            mine = [t for t in trained if t[0] == epoch]
            print(
                f"rank {rank} epoch {epoch}: {len(mine)} steps, "
                f"{len({t[1] for t in mine})} shards, loss {loss.item():.4f}",
                flush=True,
            )
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    # The ranks compare their final parameters through the mailbox, not with a collective
    # (all_gather here aborted 1 run in 5 at exit). Each rank stores its own; the rank that
    # sees every rank's, and wins the put_if_absent, prints the comparison: exactly one does.
    check = f"examples/train_ddp/{run_id}"
    box.put(f"{check}/rank{rank}", json.dumps(params).encode())
    stored = [json.loads(box.get(key)) for key in box.list(f"{check}/rank")]
    if len(stored) == dist.get_world_size() and box.put_if_absent(f"{check}/compared", b""):
        print(f"final parameters identical on every rank: {all(s == params for s in stored)}")
        print(f"see the run: gradientmail status {url}")
    if args.out:
        report = {"rank": rank, "trained": trained, "params": params}
        Path(args.out, f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
