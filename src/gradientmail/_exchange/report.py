"""The shared models of a run, for ``gradientmail status``: versions and each learner's line.

Reads only: one listing of ``exchange/`` and one GET per shared model's head. Imports no
torch.
"""

from __future__ import annotations

import time

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
