"""Properties that protect atomicity under real concurrency: races and CAS counters.

Only these see a store that checks and then writes: every single call on such a store
behaves. The race machinery itself is :mod:`gradientmail.conformance._races`.

A single-winner race property runs two fixed races and a few drawn ones, then, when the
run aims at a bound (:attr:`SuiteOptions.target_bound`), races batches of fresh keys until
it has contested its share of the keys the bound needs (:mod:`gradientmail.conformance._plan`).
Its summary states how many keys were contested and the bound on the double-win rate they
give (:mod:`gradientmail.conformance._power`).
"""

from __future__ import annotations

from gradientmail.conformance._context import (
    Context,
    Property,
    PropertyErrored,
    PropertyFailed,
    PropertySkipped,
    require_hypothesis,
)
from gradientmail.conformance._plan import BATCH_KEYS, BATCH_PAYLOAD
from gradientmail.conformance._power import power_statement
from gradientmail.conformance._races import Mode, RaceReport, cas_counter, race_put_if_absent
from gradientmail.mailbox import Capability

__all__ = [
    "BIG",
    "CONCURRENCY_PROPERTIES",
    "check_cas_counter_processes",
    "check_cas_counter_threads",
    "check_race_processes",
    "check_race_threads",
]


#: The payload of the large-value race: above the 5 MiB at which common S3 servers and
#: emulators stop holding a body in memory.
BIG = 6 << 20


def _race_once(
    ctx: Context, mode: Mode, racers: int, keys: int, payload: int, name: str
) -> RaceReport:
    """One race on fresh keys under ``name`` in the property's namespace."""
    report = race_put_if_absent(
        ctx.box,
        racers=racers,
        keys=keys,
        mode=mode,
        payload_size=payload,
        prefix=ctx.key(name),
        timeout=ctx.options.timeout,
    )
    ctx.unknown_outcomes += sum(len(names) for names in report.unknown.values())
    return report


def _race(ctx: Context, mode: Mode) -> str:
    """Fixed races, drawn races, then top-up batches until the contested-key target."""
    hypothesis = require_hypothesis()
    from hypothesis import strategies as st

    most = ctx.options.threads if mode == "threads" else ctx.options.processes
    if most < 2:
        raise PropertySkipped(f"--{mode} {most}: a race needs at least 2 racers")
    keys_max = ctx.options.keys_per_race
    generated = 0 if ctx.options.quick else (3 if mode == "threads" else 1)
    runs: list[str] = []
    failure: list[Exception] = []

    def race(racers: int, keys: int, payload: int) -> None:
        size = "6 MiB" if payload == BIG else f"{payload}-byte"
        label = f"{racers} {mode} × {keys} keys, {size} values"
        report = _race_once(ctx, mode, racers, keys, payload, f"race{len(runs)}")
        runs.append(f"{racers}×{keys}" + (" (6 MiB values)" if payload == BIG else ""))
        if not report.ok:
            failure.append(_failure(ctx, mode, report, label))
            raise AssertionError(str(failure[-1]))
        ctx.contested += report.contested

    phases = [hypothesis.Phase.explicit] + ([hypothesis.Phase.generate] if generated else [])
    test = hypothesis.given(
        racers=st.integers(2, most),
        keys=st.integers(1, keys_max),
        payload=st.sampled_from([0, 1, 64, 4096, 65536]),
    )(race)
    # Two fixed races always run first: many keys with small values, then fewer keys with
    # values large enough that a store buffering the body (to disk, say) between its check
    # and its write shows the gap: moto, for one, spills bodies over 5 MiB to a file there.
    test = hypothesis.example(racers=min(most, 8), keys=max(2, keys_max // 3), payload=BIG)(test)
    test = hypothesis.example(racers=most, keys=keys_max, payload=64)(test)
    test = hypothesis.settings(
        max_examples=max(generated, 1),
        phases=phases,
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        print_blob=False,
    )(test)
    test = hypothesis.seed(ctx.seed)(test)
    try:
        test()
    except Exception as exc:
        if failure:
            raise failure[0] from exc
        raise
    batches = _top_up(ctx, mode, most)
    shapes = ", ".join(runs)
    plural = "batch" if batches == 1 else "batches"
    more = f" and {batches} {plural} of up to {BATCH_KEYS} keys, {most} {mode}" if batches else ""
    unknown = (
        f"\n{ctx.unknown_outcomes} calls raised OutcomeUnknownError (allowed after a lost "
        "response); the bytes stored on those keys were still one claimant's"
        if ctx.unknown_outcomes
        else ""
    )
    return (
        f"exactly one winner per key, holding its bytes, in {len(runs)} races ({shapes}){more}"
        f"\n{power_statement(ctx.contested)}{unknown}"
    )


def _top_up(ctx: Context, mode: Mode, most: int) -> int:
    """Race batches of fresh keys, ``most`` racers each, until the target; return how many.

    Every key of a batch starts from a shared start line, so each one is truly contested.
    """
    batches = 0
    target = ctx.contested_target or 0
    while ctx.contested < target:
        keys = min(BATCH_KEYS, target - ctx.contested)
        report = _race_once(ctx, mode, most, keys, BATCH_PAYLOAD, f"batch{batches}")
        batches += 1
        if not report.ok:
            label = f"{most} {mode} × {keys} keys, batch {batches}"
            raise _failure(ctx, mode, report, f"{label}, after {ctx.contested} clean keys")
        ctx.contested += report.contested
    return batches


def _failure(ctx: Context, mode: Mode, report: RaceReport, label: str) -> Exception:
    """What a failed race raises: a shrunk counterexample, or the racers' error.

    Two winners on a key, or a winner whose bytes are not stored, is the store seen
    breaking atomicity (:class:`PropertyFailed`). Racers that got errors, and left keys
    nobody won, say nothing about atomicity (:class:`PropertyErrored`).
    """
    first = f"{report.counterexample()} [{label}]"
    if report.multiple_winners() or report.wrong_bytes() or not report.errors:
        return PropertyFailed(_smallest_race(ctx, mode, first))
    return PropertyErrored(first)


def _smallest_race(ctx: Context, mode: Mode, first: str) -> str:
    """Try the smallest possible race (2 racers, 1 key) a few times; report it if it fails.

    Races do not replay deterministically, so hypothesis cannot shrink them; this is the
    one shrink step worth trying, and the counterexample it gives is the clearest.
    """
    for attempt in range(5 if mode == "threads" else 2):
        report = _race_once(ctx, mode, 2, 1, 16, f"minimal{attempt}")
        if not report.ok:
            return f"{report.counterexample()} [2 {mode} × 1 key]\nfirst seen: {first}"
    return first


def check_race_threads(ctx: Context) -> str:
    """Threads race put_if_absent: exactly one winner per key, and the winner's bytes stored."""
    return _race(ctx, "threads")


def check_race_processes(ctx: Context) -> str:
    """Processes, each with its own client, race put_if_absent: exactly one winner per key."""
    return _race(ctx, "processes")


def _counter(ctx: Context, mode: Mode) -> str:
    workers = min(ctx.options.threads, 8) if mode == "threads" else ctx.options.processes
    if workers < 2:
        raise PropertySkipped(f"--{mode} {workers}: a CAS race needs at least 2 workers")
    increments = 5 if ctx.options.quick else 10
    report = cas_counter(
        ctx.box,
        workers=workers,
        increments=increments,
        mode=mode,
        key=ctx.key("counter"),
        timeout=ctx.options.timeout,
    )
    if not report.ok:
        text = f"{report.counterexample()} [{workers} {mode} × {increments} increments]"
        # A worker that got an error says nothing about lost updates.
        raise PropertyErrored(text) if report.errors else PropertyFailed(text)
    return (
        f"{workers} {mode} × {increments} increments = {report.final} "
        f"({report.conflicts} lost swaps retried)"
    )


def check_cas_counter_threads(ctx: Context) -> str:
    """N threads × K compare-and-swap increments end at exactly N×K."""
    return _counter(ctx, "threads")


def check_cas_counter_processes(ctx: Context) -> str:
    """N processes × K compare-and-swap increments end at exactly N×K."""
    return _counter(ctx, "processes")


_ATOMIC = Capability.ATOMIC_CREATE
_CAS = Capability.COMPARE_AND_SWAP
_SHARED = Capability.SHARED_ACROSS_PROCESSES

#: In report order: single-winner races, then CAS counters; threads before processes.
CONCURRENCY_PROPERTIES: tuple[Property, ...] = (
    Property(
        "race-threads",
        "two threads both winning one key (check-then-write stores)",
        check_race_threads,
        (_ATOMIC,),
        atomicity=True,
        race_mode="threads",
        needs=("hypothesis",),
    ),
    Property(
        "race-processes",
        "two processes (own clients) both winning one key",
        check_race_processes,
        (_ATOMIC, _SHARED),
        atomicity=True,
        race_mode="processes",
        needs=("hypothesis",),
    ),
    Property(
        "cas-counter-threads",
        "lost updates when threads compare-and-swap one counter",
        check_cas_counter_threads,
        (_CAS,),
        atomicity=True,
    ),
    Property(
        "cas-counter-processes",
        "lost updates when processes compare-and-swap one counter",
        check_cas_counter_processes,
        (_CAS, _SHARED),
        atomicity=True,
    ),
)
