"""The shared models of a run, for ``gradientmail status``: versions and each learner's line.

Reads only: one listing of ``exchange/`` and one GET per shared model's head. Imports no
torch.
"""

from __future__ import annotations

import time
from typing import Any

from gradientmail._errors import GradientMailError, KeyNotFoundError
from gradientmail._exchange.layout import ROOT, Head
from gradientmail.mailbox import Mailbox


def read_shared_models(mailbox: Mailbox) -> dict[str, Head | str]:
    """Each shared model's head by name; a string says why one could not be read."""
    models: dict[str, Head | str] = {}
    for key in mailbox.list(ROOT):
        parts = key[len(ROOT) :].split("/")
        if len(parts) != 2 or parts[1] != "head":
            continue
        try:
            models[parts[0]] = Head.decode(mailbox.get(key), key)
        except KeyNotFoundError:
            continue
        except GradientMailError as exc:
            models[parts[0]] = str(exc)
    return models


def format_shared_models(models: dict[str, Head | str], now: float | None = None) -> str:
    """A table per shared model: version, and per learner exchanges, staleness, drops, wait."""
    now = time.time() if now is None else now
    lines: list[str] = []
    for name, head in sorted(models.items()):
        if isinstance(head, str):
            lines.append(f"shared model {name!r}: unreadable: {head}")
            continue
        lines.append(
            f"shared model {name!r}: version {head.version}, "
            f"{len(head.learners)} learners, {head.fragments} fragments a version"
        )
        lines.append(
            f"  {'learner':<16} {'exchanges':>9} {'staleness':>9} {'dropped':>7} "
            f"{'exchange wait':>13}  last exchange"
        )
        for learner, entry in sorted(head.learners.items()):
            ago = f"{now - entry.applied_at:.0f} s ago" if entry.applied_at else "never"
            gone = ", left" if entry.left else ""
            lines.append(
                f"  {learner:<16} {entry.seq:>9} {entry.staleness:>9} {entry.dropped:>7} "
                f"{entry.blocked_s:>12.2f}s  {ago}{gone}"
            )
    return "\n".join(lines)


def shared_models_json(models: dict[str, Head | str]) -> dict[str, Any]:
    """``status --json``'s ``shared_models``: per shared model, by name, ``version``,
    ``fragments``, ``exchanges`` (applied, every learner's together) and ``learners``, one
    object per learner sorted by id: ``learner``, ``exchanges``, ``staleness`` (of its last
    exchange, in versions), ``dropped``, ``blocked_s`` (its training loop's time blocked),
    ``last_exchange_at`` (unix seconds by the learner's clock; ``null`` before its first),
    ``left``. A model whose head cannot be read is ``{"unreadable": why}``."""
    found: dict[str, Any] = {}
    for name, head in sorted(models.items()):
        if isinstance(head, str):
            found[name] = {"unreadable": head}
            continue
        learners = [
            {
                "learner": learner,
                "exchanges": entry.seq,
                "staleness": entry.staleness,
                "dropped": entry.dropped,
                "blocked_s": entry.blocked_s,
                "last_exchange_at": entry.applied_at or None,
                "left": entry.left,
            }
            for learner, entry in sorted(head.learners.items())
        ]
        found[name] = {
            "version": head.version,
            "fragments": head.fragments,
            "exchanges": sum(entry.seq for entry in head.learners.values()),
            "learners": learners,
        }
    return found
