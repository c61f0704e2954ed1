"""The run's own workspace: a fresh prefix below the user's URL, removed when the run ends.

``gradientmail conformance URL`` never touches keys it did not write: it opens a
:class:`Workspace`, :func:`below` ``URL`` a segment from :func:`fresh_segment` that no one
else uses, and closes it afterwards, which deletes every key under it (and, for a local
directory, the directory the run created).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass

from gradientmail._errors import GradientMailError
from gradientmail._urls import from_url
from gradientmail.conformance._report import SuiteReport
from gradientmail.conformance._runner import delete_all
from gradientmail.mailbox import Mailbox

__all__ = ["Workspace", "below", "fresh_segment", "remove_workspace"]


def below(url: str, segment: str) -> str:
    """``url`` with ``segment`` appended to its path, keeping any ``?query`` at the end.

    A plain path (no ``scheme://``) means a local directory, as in ``from_url``.
    """
    base, sep, query = url.partition("?")
    if "://" not in base:
        base = "file://" + os.path.abspath(base)
    return f"{base.rstrip('/')}/{segment}{sep}{query}"


def fresh_segment() -> str:
    """``conformance-<date>-<time>-<random>``: a name no other run uses."""
    return f"conformance-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def remove_workspace(box: Mailbox, segment: str, *, delete_keys: bool = True) -> str | None:
    """Delete every key in ``box`` (the run's workspace); return a warning, or ``None``.

    A local directory whose name is ``segment`` (the run created it) is removed too, so
    not even empty directories are left behind. With ``delete_keys=False`` (the store does
    not answer: asking it would only wait for timeouts) no request is sent.
    """
    if delete_keys:
        try:
            delete_all(box)
        except GradientMailError as exc:
            return f"warning: could not delete every key under {box.url}: {exc}"
    path = box.url.partition("://")[2]
    if path.startswith("/") and os.path.basename(path) == segment and os.path.isdir(path):
        close = getattr(box, "close", None)
        if close is not None:
            close()
        shutil.rmtree(path, ignore_errors=True)
    return None


@dataclass(frozen=True)
class Workspace:
    """A mailbox on a fresh prefix below the user's URL, for one run."""

    box: Mailbox
    segment: str

    @classmethod
    def open(cls, url: str) -> Workspace:
        """Open ``url`` below a fresh segment.

        Raises:
            ConfigurationError: a bad URL or option (``MissingDependencyError`` for a
                missing extra), from ``from_url``.
        """
        segment = fresh_segment()
        return cls(from_url(below(url, segment)), segment)

    def close(self, report: SuiteReport | None) -> str | None:
        """Delete what the run wrote; return a warning for the report, or ``None``.

        A store that could not be tested, or stopped answering (``report``), is not asked:
        it would only wait for timeouts.
        """
        if report is not None and report.stopped is not None:
            remove_workspace(self.box, self.segment, delete_keys=False)
            return f"warning: keys this run wrote may remain under {self.box.url}"
        answering = report is None or report.problem is None
        return remove_workspace(self.box, self.segment, delete_keys=answering)
