"""Scoring and printing for ``benchmarks/unequal_gpus.py``: curves, ratios, regime, goals."""

from __future__ import annotations

import io
import itertools
import math
import statistics
import time
from typing import Any

import torch
from unequal_gpus_workers import Plan, fresh_model, state_bytes

_MODELS: dict[str, torch.nn.Module] = {}


def _model(task: Any, plan: Plan) -> torch.nn.Module:
    if plan.task not in _MODELS:
        _MODELS[plan.task] = fresh_model(task, 0)
    return _MODELS[plan.task]


def score(task: Any, plan: Plan, state: bytes) -> float:
    """The held-out loss of a model state."""
    model = _model(task, plan)
    model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
    return float(task.heldout_loss(model))


class SharedSampler:
    """Snapshots of the exchange's shared model, and when its version moved."""

    def __init__(self, task: Any, plan: Plan) -> None:
        import gradientmail

        self.box = gradientmail.from_url(plan.url)
        self.model = fresh_model(task, plan.seed)
        self.last = -math.inf
        self.version = -1
        self.moved: list[float] = []

    def take(self, at: float, into: list[tuple[float, bytes]]) -> None:
        if time.monotonic() - self.last < 0.5:
            return
        from gradientmail import ConfigurationError
        from gradientmail.torch import load_shared

        self.last = time.monotonic()
        try:
            version = load_shared(self.model, self.box)
        except ConfigurationError:
            return  # nothing published yet
        if version != self.version:
            self.version = version
            self.moved.append(at)
        into.append((at, state_bytes(self.model)))


def time_to(curve: list[tuple[float, float]], target: float) -> float:
    return next((t for t, loss in curve if loss <= target), math.inf)


def loss_at(curve: list[tuple[float, float]], at: float) -> float:
    before = [loss for t, loss in curve if t <= at]
    return before[-1] if before else math.nan


def rank_key(curve: list[tuple[float, float]], targets: list[float]) -> float:
    """Smaller is better: the mean log time to the targets (a missed target is infinite)."""
    return statistics.fmean(math.log(max(time_to(curve, t), 1e-9)) for t in targets)


def check_pace(task: Any, args: Any) -> None:
    """Refuse a base step time that the real compute of a step could exceed."""
    model = fresh_model(task, 0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    took = []
    for i in range(6):
        began = time.perf_counter()
        loss = task.loss(model, task.batch(777_000_000 + i, args.batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        took.append(time.perf_counter() - began)
    step_ms = 1000 * statistics.median(took[1:])
    print(
        f"task {args.task}: a step of {args.batch} items takes {step_ms:.1f} ms on one core; "
        f"the fastest learner's padded step is {args.base_ms:.0f} ms"
    )
    if step_ms > 0.5 * args.base_ms:
        raise SystemExit(
            f"--base-ms {args.base_ms:.0f} is under twice the real step ({step_ms:.0f} ms): "
            "CPU contention would decide the result; give a larger --base-ms"
        )


def noise_scale(task: Any, state: bytes, batch: int, draws: int = 32) -> float:
    """McCandlish et al.'s simple noise scale ``B_simple = tr(Sigma) / |G|^2``, from the
    gradients of ``draws`` batches of ``batch`` items and of their mean."""
    model = fresh_model(task, 0)
    model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
    grads = []
    for j in range(draws):
        model.zero_grad()
        task.loss(model, task.batch(900_000_000 + j, batch)).backward()
        grads.append(
            torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        )
    stacked = torch.stack(grads)
    small = float((stacked**2).sum(1).mean())
    big_batch = draws * batch
    big = float((stacked.mean(0) ** 2).sum())
    signal = (big_batch * big - batch * small) / (big_batch - batch)
    noise = (small - big) / (1 / batch - 1 / big_batch)
    return noise / signal if signal > 0 else math.inf


def print_regime(task: Any, args: Any, alone: dict[str, Any]) -> None:
    """The gradient noise scale along the fastest learner's run, at each target."""
    group = args.batch * sum(1 / p for p in (1.0, 2.0, 2.0, 4.0))
    print(
        f"\nregime (McCandlish et al. 2018): the noise scale B_simple along the fastest "
        f"learner's run, against the static group batch {group:.0f}:"
    )
    snapshots = alone["snapshots"]
    for target in args.targets:
        at = time_to(alone["curve"], target)
        if not math.isfinite(at) or not snapshots:
            continue
        state = min(snapshots, key=lambda s: abs(s[0] - at))[1]
        b = noise_scale(task, state, args.batch)
        verdict = "more data helps" if b > group else "mostly step-limited: more data helps little"
        print(f"  at loss {target}: B_simple ~ {b:.0f} items ({verdict})")


def speeds_sum(plan_paces: tuple[float, ...]) -> float:
    return sum(min(plan_paces) / p for p in plan_paces)


def _fmt(x: float, spec: str = ".2f") -> str:
    """``never`` for a target not reached (inf); ``-`` where there is nothing to compare
    with (NaN: the fastest alone was not among the methods run, or missed the target)."""
    if math.isnan(x):
        return "-"
    return format(x, spec) if math.isfinite(x) else "never"


def _ratio(mine: float, theirs: float) -> float:
    """``mine / theirs``, or NaN (shown ``-``, never a goal met) where the peer's time is
    not finite: it never reached the target, so there is no ratio to give."""
    return mine / theirs if math.isfinite(theirs) else math.nan


def _seconds(t: float) -> str:
    return f"{t:5.1f}s" if math.isfinite(t) else " never"


def print_grid(method: str, rows: list[Any], best: Any, targets: list[float]) -> None:
    print(f"\ntuning {method} (seed 0, static): time to " + ", ".join(map(str, targets)))
    for lr, every, result in rows:
        times = "  ".join(_fmt(time_to(result["curve"], t), "6.1f") for t in targets)
        mark = "  <- chosen" if (lr, every) == best[:2] else ""
        tag = f" every {every}" if every else ""
        print(f"  lr {lr:.2e}{tag}: {times}{mark}")


def _row(
    result: dict[str, Any], alone: dict[str, Any] | None, args: Any, paces: tuple[float, ...]
) -> dict[str, float]:
    curve = result["curve"]
    row: dict[str, float] = {"wall": result["wall"], "final": curve[-1][1] if curve else math.nan}
    for t in args.targets:
        row[f"t{t}"] = time_to(curve, t)
        if alone is not None:
            t_alone = time_to(alone["curve"], t)
            row[f"x{t}"] = _ratio(row[f"t{t}"], t_alone)
            row[f"eff{t}"] = 1 / row[f"x{t}"] / speeds_sum(paces)
            # NaN: this run had ended (its budget trained) before the alone's time
            row[f"at{t}"] = loss_at(curve, t_alone) if t_alone <= result["wall"] else math.nan
    stats = [r["stats"] for r in result["reports"] if isinstance(r, dict) and "stats" in r]
    if stats:
        exchanges = max(1, sum(s.exchanges for s in stats))
        row["blocked"] = statistics.fmean(s.blocked_s for s in stats) / result["wall"]
        row["bytes"] = (
            sum(s.traffic.bytes_read + s.traffic.bytes_written for s in stats) / exchanges
        )
        row["requests"] = sum(s.traffic.requests for s in stats) / exchanges
        row["conflicts"] = sum(s.conflicts for s in stats) / exchanges
        row["stale_mean"] = sum(s.staleness_sum for s in stats) / exchanges
        row["stale_max"] = max(s.staleness_max for s in stats)
        row["gain"] = max(s.noise.gain for s in stats)
        scales = [s.noise.scale for s in stats if s.noise.scale is not None]
        row["noise_scale"] = statistics.median(scales) if scales else math.nan
    return row


def print_seed(name: str, seed: int, results: dict[str, list[dict[str, Any]]], args: Any) -> None:
    alone = results.get("alone", [None])[-1]
    print(f"\n{name}, seed {seed}: time to target (x the fastest alone)")
    for method, runs in results.items():
        row = _row(runs[-1], alone, args, _paces(name))
        cells = "  ".join(
            f"{_seconds(row[f't{t}'])} ({_fmt(row.get(f'x{t}', math.nan))})" for t in args.targets
        )
        print(f"  {method:<9} {cells}   wall {row['wall']:.0f}s")
        learners = sorted(
            (r for r in runs[-1]["reports"] if isinstance(r, dict) and "items" in r),
            key=lambda r: r["rank"],
        )
        if learners:  # the exchange: what each learner took a step, by rank (pace)
            mean = "/".join(f"{r['items'] / max(1, r['stats'].steps):.1f}" for r in learners)
            print(f"  {'':<9} items a step, each learner's mean by rank: {mean}")


#: Each scenario's paces (step time per item, the fastest 1), static unless named.
PACES = {
    "static": (1.0, 2.0, 2.0, 4.0),
    "mild": (1.0, 1.25, 1.67, 2.0),
    "wide": (1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0, 8.0),
}


def _paces(name: str) -> tuple[float, ...]:
    return PACES.get(name, PACES["static"])


def print_summary(
    results: dict[str, dict[str, list[dict[str, Any]]]],
    args: Any,
    calm: list[dict[str, Any]] | None = None,
) -> None:
    """Per scenario: the means over seeds, the exchange's costs and the goals; for churn,
    the stall and final-loss checks against ``calm``, each seed's static exchange run."""
    size = sum(p.numel() for p in _MODELS[args.task].parameters()) * 4 if _MODELS else 1
    for name, methods in results.items():
        seeds = len(next(iter(methods.values())))
        paces = _paces(name)
        shown = "/".join(f"{p:g}" for p in paces)
        print(f"\n== {name} (paces {shown}, R = {speeds_sum(paces):.2f}), means of {seeds} seed(s)")
        alone = methods.get("alone")
        rows = {
            m: [_row(r, alone[i] if alone else None, args, paces) for i, r in enumerate(runs)]
            for m, runs in methods.items()
        }
        head = "".join(f"  t({t})  xalone" for t in args.targets)
        print(f"  {'method':<9}{head}  efficiency  loss at the alone's times")
        for method, rs in rows.items():
            cells = "".join(
                f"  {_fmt(_mean(rs, f't{t}'), '5.1f')}  {_fmt(_mean(rs, f'x{t}'), '6.2f')}"
                for t in args.targets
            )
            eff = "/".join(_fmt(_mean(rs, f"eff{t}"), ".0%") for t in args.targets)
            at = "/".join(_at([r.get(f"at{t}", math.nan) for r in rs]) for t in args.targets)
            print(f"  {method:<9}{cells}  {eff:<10}  {at}")
            if "blocked" in rs[0]:
                worst = max(r["stale_max"] for r in rs)
                print(
                    f"  {'':<9}step() blocked {_mean(rs, 'blocked'):.2%} of the wall time; an "
                    f"exchange moved {_mean(rs, 'bytes') / size:.2f}x the fp32 model in "
                    f"{_mean(rs, 'requests'):.1f} requests, "
                    f"{_mean(rs, 'conflicts'):.2f} lost races; "
                    f"staleness mean {_mean(rs, 'stale_mean'):.1f}, max {worst:.0f}"
                )
                scale = _mean(rs, "noise_scale")
                if not math.isnan(scale):  # nan: the gain was off
                    print(
                        f"  {'':<9}at the end: the slowest learner's noise gain "
                        f"{_mean(rs, 'gain'):.2f}, the noise scale fitted {scale:.0f} items"
                    )
        _goals(name, rows, args)
        if name == "churn" and "exchange" in methods:
            _churn(methods["exchange"], calm or [])


def _churn(churned: list[dict[str, Any]], static: list[dict[str, Any]]) -> None:
    """No stall (the shared version kept moving), and the loss where the static run ended."""
    for seed, (run, calm) in enumerate(zip(churned, static, strict=False)):
        moved = run["moved"]
        gap = max((b - a for a, b in itertools.pairwise(moved)), default=math.nan)
        end = calm["curve"][-1][0]
        mine, theirs = loss_at(run["curve"], end), calm["curve"][-1][1]
        print(
            f"  churn seed {seed}: the shared version moved at least every {gap:.1f} s (sampled "
            f"every 0.5 s); at {end:.0f} s, where the static run ended, loss {mine:.3f} against "
            f"{theirs:.3f} ({mine / theirs - 1:+.1%}; goal within 2 %)"
        )


def _at(losses: list[float]) -> str:
    """The mean loss at the alone's time over the seeds whose run was still going then;
    ``done`` for the seeds whose run had ended (never averaged in)."""
    going = [x for x in losses if not math.isnan(x)]
    if not going:
        return "done"
    mean = _fmt(statistics.fmean(going), ".3f")
    return mean if len(going) == len(losses) else f"{mean} ({len(losses) - len(going)} done)"


def _mean(rows: list[dict[str, float]], key: str) -> float:
    values = [r.get(key, math.nan) for r in rows]
    return statistics.fmean(values) if values else math.nan


def _goals(name: str, rows: dict[str, list[dict[str, float]]], args: Any) -> None:
    if "exchange" not in rows:
        return
    ex = rows["exchange"]

    def ratio(peer: str) -> list[float]:
        """NaN (shown ``-``, never met) where the peer missed a target in some seed."""
        if peer not in rows:
            return []
        return [_ratio(_mean(ex, f"t{t}"), _mean(rows[peer], f"t{t}")) for t in args.targets]

    goals: list[tuple[str, list[float], float]] = []
    if name == "static":
        goals += [
            ("x the fastest alone", ratio("alone"), 0.55),
            ("x lockstep", ratio("lockstep"), 1.10),
        ]
    elif name == "mild":
        goals += [("x the fastest alone (2.0x faster)", ratio("alone"), 0.5)]
    elif name == "jitter5":
        goals += [("x static-profiled lockstep", ratio("lockstep"), 0.8)]
    elif name == "slowdown":
        goals += [
            ("x once-profiled lockstep", ratio("lockstep"), 0.85),
            ("x adaptive lockstep", ratio("adaptive"), 1.0),
        ]
    for label, values, bound in goals:
        if values:
            ok = all(v <= bound for v in values)
            shown = "/".join(_fmt(v) for v in values)
            print(f"  goal: exchange {label} <= {bound}: {shown}  {'met' if ok else 'NOT met'}")
            if any(math.isnan(v) for v in values):
                print("        (-: the peer missed that target within --cap; raise it to compare)")
    blocked = _mean(ex, "blocked")
    verdict = "met" if blocked <= 0.02 else "NOT met"
    print(f"  goal: step() blocked <= 2 % of the wall time: {blocked:.2%}  {verdict}")
