"""Learner processes that stop themselves (SIGSTOP) at a chosen point inside a ``file://`` call.

A paused process is only as harmless as what it holds when it stops. These workers stop
inside the operation a test is about, every time, instead of wherever a signal from outside
happens to land: a hook on the system call that does the operation's work stops the process
right after that call, before the operation returns.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import torch

from gradientmail import Mailbox
from tests.support.exchange_workers import exact_exchange, integer_model

#: A fragment's file name on disk (``data/{token}/{index:05d}``): what the exchange deletes.
FRAGMENT = re.compile(r"\d{5}\.v")


def stop_after_removing_a_fragment() -> None:
    """From now on, this process stops itself the first time it removes a fragment's file.

    Hooks both ways a ``file://`` delete removes a value file: moving it out of its folder
    (``rename``) or unlinking it where it is, so the stop lands inside the delete, after the
    file went and before the call returns.
    """
    real_rename, real_unlink = os.rename, os.unlink

    def stop_if_a_fragment(name: Any) -> None:
        if isinstance(name, str) and FRAGMENT.fullmatch(name):
            os.rename, os.unlink = real_rename, real_unlink
            os.kill(os.getpid(), signal.SIGSTOP)

    def rename(src: Any, *args: Any, **kwargs: Any) -> None:
        real_rename(src, *args, **kwargs)
        stop_if_a_fragment(src)

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        real_unlink(path, *args, **kwargs)
        stop_if_a_fragment(path)

    os.rename, os.unlink = rename, unlink  # type: ignore[assignment]


def learner_stopping_in_a_delete(box: Mailbox, learner: str, steps: int, out: str) -> None:
    """An exact learner (steps of -1, an exchange every step, 16 fragments a version) that
    stops itself inside its first delete of a fragment; writes its total to ``out``."""
    model = integer_model()
    stop_after_removing_a_fragment()
    with exact_exchange(model, box, learner, every=1, fragment_bytes=4) as exchange:
        for _ in range(steps):
            with torch.no_grad():
                for p in model.parameters():
                    p -= 1
            exchange.step()
            time.sleep(0.02)  # pacing: an exchange a step, so that versions leave the history
    Path(out).write_text(json.dumps({"total": -steps}))
