"""Learner processes for the exchange tests: integer steps, so outcomes are exact."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gradientmail import Mailbox

#: Every learner starts from these parameters, whoever publishes first.
SHAPE = (3, 4)


def integer_model() -> torch.nn.Module:
    """A small model whose parameters are integers, identical on every learner."""
    model = torch.nn.Linear(SHAPE[1], SHAPE[0])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.arange(p.numel(), dtype=torch.float32).view_as(p) * 10)
    return model


def subtract(model: torch.nn.Module, size: float) -> None:
    """One local "step": every parameter moves by exactly ``-size``."""
    with torch.no_grad():
        for p in model.parameters():
            p -= size


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def initial() -> torch.Tensor:
    """The integer model's parameters, flat: where every shared model of these tests starts."""
    return flat(integer_model())


def shared_now(box: Mailbox) -> torch.Tensor:
    """The shared integer model's current parameters, flat."""
    from gradientmail.torch import load_shared

    model = integer_model()
    load_shared(model, box)
    return flat(model)


def exact_exchange(
    model: torch.nn.Module,
    box: Mailbox,
    learner: str,
    every: int,
    fragment_bytes: int = 16,
    **options: Any,
) -> Any:
    """An Exchange that moves the shared model by exactly each learner's progress.

    ``outer_lr=1``, no staleness weight and no drop (``options`` may set others, the same
    for every learner of a shared model), in fragments of ``fragment_bytes`` (16: a
    version spans several, so a half-written one would show).
    """
    from gradientmail.torch import Exchange

    exact: dict[str, Any] = {"outer_lr": 1.0, "staleness": None, "max_staleness": None}
    return Exchange(
        model,
        mailbox=box,
        learner_id=learner,
        every=every,
        fragment_bytes=fragment_bytes,
        **{**exact, **options},
    )


def integer_steps(
    box: Mailbox,
    learner: str,
    steps: int,
    size: int,
    out: str,
    every: int = 2,
    step_s: float = 0.0,
    fragment_bytes: int = 16,
) -> None:
    """Take ``steps`` local steps of ``-size`` on every parameter; write the total to ``out``.

    Progress lines (``{"steps": n}``) are appended to ``out + ".log"`` after each step, so a
    test can act once a learner has made some.
    """
    model = integer_model()
    log = Path(out + ".log")
    with exact_exchange(model, box, learner, every, fragment_bytes) as exchange:
        for step in range(steps):
            subtract(model, size)
            exchange.step()
            with log.open("a") as f:
                f.write(
                    json.dumps({"steps": step + 1, "exchanges": exchange.stats.exchanges}) + "\n"
                )
            if step_s:
                time.sleep(step_s)  # pacing: a slower learner, not synchronisation
    Path(out).write_text(json.dumps({"total": -size * steps, "stats": exchange.stats.exchanges}))


def progress(out: str) -> int:
    """How many steps the learner writing ``out`` has logged."""
    try:
        lines = Path(out + ".log").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return len(lines)


def exchange_outcome(box: Mailbox, out: str) -> None:
    """Build an Exchange over ``box`` in this process; write what happened to ``out``."""
    from gradientmail.torch import Exchange

    try:
        Exchange(integer_model(), mailbox=box, learner_id="child")
        Path(out).write_text("accepted")
    except Exception as exc:  # noqa: BLE001 - reported to the test
        Path(out).write_text(f"{type(exc).__name__}: {exc}")


def totals_of_threads(learner: Callable[[int], int], count: int) -> dict[int, int]:
    """Run ``learner(i)`` in ``count`` threads at once; return each one's total delta, and
    fail on the first error any of them raised."""
    totals: dict[int, int] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            totals[i] = learner(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(totals) == count, "every learner finished"
    return totals


def recipe_steps(box: Mailbox, learner: str, out: str, stop: str, item_s: float) -> None:
    """Train with ``batch_size=4`` at ``item_s`` seconds an item until the file ``stop``
    exists; after each step append ``{"steps", "batch", "group_batch", "others",
    "version"}`` to ``out`` as a line: how many other learners this one counts in the
    group's batch, and the shared version it last adopted."""
    from gradientmail.torch import Exchange

    model = integer_model()
    with Exchange(model, mailbox=box, learner_id=learner, batch_size=4) as exchange:
        steps = 0
        while not Path(stop).exists():
            time.sleep(item_s * exchange.batch_size)  # pacing: its compute, not synchronisation
            exchange.step()
            steps += 1
            line = {
                "steps": steps,
                "batch": exchange.batch_size,
                "group_batch": exchange.group_batch,
                "others": len(exchange._work.others),
                "version": exchange.stats.version,
            }
            with Path(out).open("a") as f:
                f.write(json.dumps(line) + "\n")


def reports(out: str) -> list[dict[str, Any]]:
    """The lines ``recipe_steps`` wrote to ``out`` so far (a line being written is left)."""
    try:
        text = Path(out).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]
