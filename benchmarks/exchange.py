"""One model from unequal learners: the exchange against lockstep DDP, in the same run.

A small decoder-only transformer learns the bytes of the Python standard library's own
source files (on every machine; a tenth is held out). Four learner processes have step
times padded to 1x, 2x, 2x and 4x a base, so CPU contention does not decide the result.
Every method sees the same tokens, inner optimizer (AdamW) and batch order, in one run:

* ``ddp``: gloo lockstep DDP, 4 ranks, a fixed split of the batches;
* ``diloco``: synchronous DiLoCo, 4 ranks, the same ``every``, outer Nesterov 0.7 / 0.9;
* ``independent``: four models on a shared queue, no exchange (the fastest one is scored);
* ``alone``: the fastest learner alone, on every batch;
* ``exchange`` (ours): the four learners on a shared queue, one shared model through
  ``gradientmail.torch.Exchange`` (``--outer``, ``--outer-lr``, ``--staleness``; the
  library's defaults unless given), on ``file://``.

Scenarios (``--scenario``): ``static``; ``slowdown`` (the fastest learner slows 3x halfway);
``churn`` (one learner killed at 40 % of its batches, a new one joining at 60 %; exchange only).

It prints, per method, the wall time to the target (within 1 % of DDP's final held-out
loss) as a ratio to DDP's own time to it, the final held-out loss at equal tokens, and for
the exchange the share of time blocked in ``step()``, bytes and requests per exchange,
conflicts and staleness. Every method's curve is scored after its run, from snapshots taken
during it (the exchange's by reading the shared model), so scoring never takes the
learners' CPU.

Run: ``python benchmarks/exchange.py [--seeds 3] [--scenario static] [--wire bfloat16]``
(about 3 minutes a seed on 2 cores; ``--every`` defaults to 1, ``--unit`` to 8 batches a
shared-queue unit). ``bytes/x`` is per exchange, as a multiple of the
model's fp32 size.
"""

from __future__ import annotations

import argparse
import io
import math
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

CONTEXT = 64
BATCH = 16
PACES = [1.0, 2.0, 2.0, 4.0]


# -- data and model -----------------------------------------------------------------------------


def corpus(limit: int = 2_000_000) -> tuple[torch.Tensor, torch.Tensor]:
    """The stdlib's own ``.py`` files as bytes: (train, held-out), split 90/10 by file."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))
    data = [f.read_bytes() for f in files]
    held = b"".join(data[::10])[: limit // 10]
    train = b"".join(d for i, d in enumerate(data) if i % 10)[:limit]
    return _as_tokens(train), _as_tokens(held)


def _as_tokens(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batches_of(train: torch.Tensor, count: int, seed: int) -> list[torch.Tensor]:
    """``count`` batches of ``BATCH`` windows of ``CONTEXT + 1`` bytes, in a seeded order."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(train) - CONTEXT - 1, (count, BATCH), generator=generator)
    return [torch.stack([train[s : s + CONTEXT + 1] for s in row.tolist()]) for row in starts]


class Decoder(nn.Module):
    """A 2-layer causal transformer over bytes."""

    def __init__(self, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.zeros(CONTEXT, width))
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(width, 256)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.out(self.blocks(x, mask=self.mask, is_causal=True))  # type: ignore[no-any-return]


def loss_of(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))


def evaluate(model: nn.Module, held: torch.Tensor) -> float:
    with torch.no_grad():
        return float(statistics.fmean(loss_of(model, b).item() for b in batches_of(held, 8, 99)))


def fresh_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return Decoder()


def pad(began: float, seconds: float) -> None:
    spare = seconds - (time.perf_counter() - began)
    if spare > 0:
        time.sleep(spare)  # this learner's "GPU" is slower: pacing, not synchronisation


# -- learners ---------------------------------------------------------------------------------


def queue_learner(cfg: dict[str, Any], rank: int, out: Any, start: Any) -> None:
    """A learner on a shared queue; with ``cfg['exchange']``, one shared model."""
    import gradientmail
    from gradientmail.patterns.shared_queue import shared_queue
    from gradientmail.torch import Exchange

    torch.set_num_threads(1)
    box = gradientmail.from_url(cfg["url"])
    batches = batches_of(cfg["train"], cfg["steps"], cfg["seed"])
    units = {f"u{i:04d}": i for i in range(0, len(batches), cfg["unit"])}
    model = fresh_model(cfg["seed"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    name = cfg.get("name") or f"learner-{rank}"
    exchange = (
        Exchange(
            model,
            mailbox=box,
            learner_id=name,
            every=cfg["every"],
            outer=cfg["outer"],
            outer_lr=cfg["outer_lr"],
            staleness=cfg["staleness"],
            max_staleness=cfg["max_staleness"],
            wire=cfg["wire"],
        )
        if cfg["exchange"]
        else None
    )
    snapshots: list[tuple[float, bytes]] = []
    if start is not None:
        start.wait()  # every learner has imported torch and built its model
    began, steps, pace = time.time(), 0, cfg["paces"][rank]

    def load(first: int) -> Any:
        yield from batches[first : first + cfg["unit"]]

    queue = shared_queue(units, mailbox=box, learner_id=name, load=load, lease=cfg["lease"])
    with exchange or _null(), queue as q:
        for batch in q:
            step_began = time.perf_counter()
            loss = loss_of(model, batch)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]  # torch's stubs leave it untyped
            optimizer.step()
            if exchange is not None:
                exchange.step()
            steps += 1
            if (
                cfg["slowdown"]
                and rank == 0
                and steps >= cfg["steps"] / sum(1 / p for p in PACES) / 2
            ):
                pace = cfg["paces"][rank] * 3  # another job started on its GPU, halfway
            if cfg.get("die_at") and steps >= cfg["die_at"]:
                os._exit(0)  # killed: no final exchange, no release
            pad(step_began, cfg["base"] * pace)
            if rank == 0 and not cfg["exchange"] and steps % 10 == 0:
                snapshots.append((time.time(), _copy(model)))
    stats = exchange.stats if exchange else None
    out.put(
        {
            "rank": rank,
            "end": time.time(),
            "steps": steps,
            "snapshots": snapshots,
            "stats": stats,
            "began": began,
        }
    )


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _copy(model: nn.Module) -> bytes:
    """The model's state as bytes: tensors themselves would travel through the queue as
    shared-memory handles, which die with the process that sent them."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


def lockstep_rank(cfg: dict[str, Any], rank: int, out: Any, start: Any) -> None:
    """One rank of gloo DDP (``every`` 0) or synchronous DiLoCo (``every`` > 0)."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    world = len(cfg["paces"])
    dist.init_process_group(
        "gloo", init_method=f"file://{cfg['rendezvous']}", rank=rank, world_size=world
    )
    batches = batches_of(cfg["train"], cfg["steps"], cfg["seed"])[rank::world]
    model = fresh_model(cfg["seed"])
    diloco = cfg["every"] > 0
    net = model if diloco else nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    anchor = [p.detach().clone() for p in model.parameters()]
    momentum = [torch.zeros_like(p) for p in model.parameters()]
    snapshots: list[tuple[float, bytes]] = []
    start.wait()
    began = time.time()
    for step, batch in enumerate(batches, 1):
        step_began = time.perf_counter()
        loss = loss_of(net, batch)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # DDP all-reduces here, for the slowest
        optimizer.step()
        slow = 3 if cfg["slowdown"] and rank == 0 and step >= len(batches) / 2 else 1
        pad(step_began, cfg["base"] * cfg["paces"][rank] * slow)
        if diloco and step % cfg["every"] == 0:
            with torch.no_grad():
                for p, a, m in zip(model.parameters(), anchor, momentum, strict=True):
                    delta = a - p  # the outer gradient
                    dist.all_reduce(delta)
                    delta /= world
                    m.mul_(0.9).add_(delta)
                    a.sub_(0.7 * (delta + 0.9 * m))  # Nesterov
                    p.copy_(a)
        if rank == 0 and step % 10 == 0:
            snapshots.append((time.time(), _copy(model)))
    out.put(
        {
            "rank": rank,
            "end": time.time(),
            "steps": len(batches),
            "snapshots": snapshots,
            "stats": None,
            "began": began,
        }
    )
    dist.destroy_process_group()


# -- one method, one run ----------------------------------------------------------------------


def run_method(method: str, cfg: dict[str, Any], held: torch.Tensor) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    work = Path(tempfile.mkdtemp(prefix=f"gm-bench-{method}-"))
    cfg = {**cfg, "url": f"file://{work / 'run'}", "rendezvous": str(work / "rdzv")}
    if method == "alone":
        cfg = {**cfg, "paces": PACES[:1], "exchange": False}
    if method in ("ddp", "diloco"):
        cfg = {**cfg, "every": cfg["every"] if method == "diloco" else 0}
        targets = [(lockstep_rank, r, cfg) for r in range(len(PACES))]
    else:
        cfg = {**cfg, "exchange": method == "exchange"}
        targets = [(queue_learner, r, cfg) for r in range(len(cfg["paces"]))]
        if cfg.get("churn") and method == "exchange":
            targets[1] = (queue_learner, 1, {**cfg, "die_at": cfg["steps"] // 10})
            joiner = {**cfg, "name": "joiner", "paces": cfg["paces"][:1] + [2.0] * 4}
    start = ctx.Barrier(len(targets) + 1)
    procs = [ctx.Process(target=t, args=(c, r, out, start)) for t, r, c in targets]
    for proc in procs:
        proc.start()
    start.wait()  # time counts from when every learner is ready, for every method
    began = time.time()
    curve: list[tuple[float, float]] = []
    shared: list[tuple[float, bytes]] = []
    reports: list[dict[str, Any]] = []
    joined = False
    expected = len(procs) - (1 if cfg.get("churn") and method == "exchange" else 0)
    sampler = SharedSampler(cfg) if method == "exchange" else None
    while len(reports) < expected + int(joined):
        if sampler is not None:
            # scored after the run, as the other methods' snapshots are: scoring now would
            # take the learners' CPU
            sampler.take(time.time() - began, shared)
            if cfg.get("churn") and not joined and time.time() - began > 0.6 * cfg["wall_hint"]:
                proc = ctx.Process(target=queue_learner, args=(joiner, 4, out, None))
                proc.start()
                procs.append(proc)
                joined = True
        try:
            reports.append(out.get(timeout=0.25))
        except queue.Empty:  # sample again
            continue
    for proc in procs:
        proc.join(timeout=120)
    if sampler is not None:
        sampler.take(max(r["end"] for r in reports) - began, shared)
    snapshots = shared + [
        (at - began, state) for report in reports for at, state in report["snapshots"]
    ]
    model = fresh_model(cfg["seed"])
    for at, state in sorted(snapshots, key=lambda snapshot: snapshot[0]):
        model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
        curve.append((at, evaluate(model, held)))
    stats = [r["stats"] for r in reports if r.get("stats") is not None]
    wall = max(r["end"] for r in reports) - began
    shutil.rmtree(work, ignore_errors=True)
    return {"curve": curve, "wall": wall, "stats": stats}


class SharedSampler:
    """Snapshots of the exchange's shared model, read through one mailbox."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        import gradientmail

        self.box = gradientmail.from_url(cfg["url"])
        self.model = fresh_model(cfg["seed"])

    def take(self, at: float, into: list[tuple[float, bytes]]) -> None:
        """Append ``(at, the shared model's state)``; nothing before it is published."""
        from gradientmail import ConfigurationError
        from gradientmail.torch import load_shared

        try:
            load_shared(self.model, self.box)
        except ConfigurationError:
            return
        into.append((at, _copy(self.model)))


def time_to(curve: list[tuple[float, float]], target: float) -> float:
    return next((t for t, loss in curve if loss <= target), math.inf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--scenario", choices=["static", "slowdown", "churn"], default="static")
    parser.add_argument("--steps", type=int, default=640, help="batches in all, every method")
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--unit", type=int, default=8, help="batches per shared-queue unit")
    parser.add_argument("--base-ms", type=float, default=60.0)
    parser.add_argument("--outer", default="average")
    parser.add_argument("--methods", default="ddp,diloco,independent,alone,exchange")
    parser.add_argument("--wire", default="float32", help="the exchange's wire dtype")
    parser.add_argument("--outer-lr", type=float, default=None, help="None: the rule's default")
    parser.add_argument("--staleness", type=float, default=1.0, help="exponent; -1: no weight")
    parser.add_argument(
        "--max-staleness", type=int, default=64, help="drop deltas staler than this"
    )
    args = parser.parse_args()
    train, held = corpus()
    methods = args.methods.split(",")
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    for seed in range(args.seeds):
        cfg = {
            "train": train,
            "steps": args.steps,
            "seed": seed,
            "unit": args.unit,
            "lr": 3e-3,
            "every": args.every,
            "outer": args.outer,
            "outer_lr": args.outer_lr,
            "staleness": None if args.staleness < 0 else args.staleness,
            "wire": args.wire,
            "max_staleness": args.max_staleness,
            "base": args.base_ms / 1000,
            "paces": PACES,
            "slowdown": args.scenario == "slowdown",
            "lease": 5.0 if args.scenario == "churn" else 60.0,
            "churn": args.scenario == "churn",
            "wall_hint": args.steps / sum(1 / p for p in PACES) * args.base_ms / 1000,
        }
        results = {m: run_method(m, cfg, held) for m in methods}
        ddp = results.get("ddp")
        target = ddp["curve"][-1][1] * 1.01 if ddp else math.nan
        ddp_time = time_to(ddp["curve"], target) if ddp else math.nan
        for m, result in results.items():
            rows[m].append(figures(result, target, ddp_time))
        print(f"seed {seed}: target {target:.4f} (DDP's final + 1 %), DDP at {ddp_time:.1f}s")
        for m in methods:
            row = rows[m][-1]
            print(f"  {m:<12} time/DDP {row['ratio']:.2f}  final {row['final']:.4f}")
    size = sum(p.numel() for p in Decoder().parameters()) * 4
    print(
        f"\nscenario {args.scenario}, {args.seeds} seed(s), {args.steps} batches, "
        f"model {size / 1e6:.2f} MB fp32, wire {args.wire}, means over seeds"
    )
    print(
        f"{'method':<12} {'time/DDP':>9} {'final loss':>10} {'wall s':>7} {'blocked':>8} "
        f"{'bytes/x':>8} {'req/x':>6} {'conflicts':>9} {'stale mean/max':>14}"
    )
    for m, runs in rows.items():
        line = f"{m:<12} {_mean(runs, 'ratio'):>9.2f} {_mean(runs, 'final'):>10.4f} "
        line += f"{_mean(runs, 'wall'):>7.1f}"
        if "bytes" in runs[0]:
            line += (
                f" {_mean(runs, 'blocked'):>8.2%} {_mean(runs, 'bytes') / size:>7.2f}x "
                f"{_mean(runs, 'requests'):>6.1f} {_mean(runs, 'conflicts'):>9.0f} "
                f"{_mean(runs, 'stale_mean'):>9.1f}/{_mean(runs, 'stale_max'):.0f}"
            )
        print(line)


def _mean(runs: list[dict[str, float]], key: str) -> float:
    return statistics.fmean(r.get(key, math.nan) for r in runs)


def figures(result: dict[str, Any], target: float, ddp_time: float) -> dict[str, float]:
    """One method's figures in one seed; the exchange's traffic per exchange, per learner."""
    row = {
        "ratio": time_to(result["curve"], target) / ddp_time,
        "final": result["curve"][-1][1],
        "wall": result["wall"],
    }
    stats = result["stats"]
    if stats:
        exchanges = max(1, sum(s.exchanges for s in stats))
        row["blocked"] = statistics.fmean(s.blocked_s for s in stats) / result["wall"]
        row["bytes"] = (
            sum(s.traffic.bytes_read + s.traffic.bytes_written for s in stats) / exchanges
        )
        row["requests"] = sum(s.traffic.requests for s in stats) / exchanges
        row["conflicts"] = sum(s.conflicts for s in stats)
        row["stale_mean"] = sum(s.staleness_sum for s in stats) / exchanges
        row["stale_max"] = max(s.staleness_max for s in stats)
    return row


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
