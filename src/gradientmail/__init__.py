"""gradientmail: coordinate training nodes through the object store you already have.

Public names only. ``import gradientmail`` imports no cloud SDK and no torch: backends and
patterns load their dependencies when first used (``gradientmail.torch``, the DataLoader
adapter, imports torch and is never imported from here).

Logging goes to ``logging.getLogger("gradientmail")`` and its children (one per module).
That logger carries a ``NullHandler``, so the library prints nothing until the application
configures logging.
"""

from __future__ import annotations

import logging as _logging
from importlib import metadata as _metadata

from gradientmail import _errors
from gradientmail._errors import *  # noqa: F403 - every error is public; _errors.__all__ lists them
from gradientmail._identity import Identity, identify, learner_id
from gradientmail._urls import from_url
from gradientmail.backends._base import BaseMailbox
from gradientmail.mailbox import (
    Capability,
    Mailbox,
    SupportsCompareAndSwap,
    SupportsListStartAfter,
    Version,
)
from gradientmail.session import Session

_logging.getLogger("gradientmail").addHandler(_logging.NullHandler())

# The errors live in an internal module; tracebacks and reprs name them where users import
# them from (``gradientmail.LeaseLostError``), and pickles find them there too.
for _name in _errors.__all__:
    getattr(_errors, _name).__module__ = __name__
del _name

try:  # one source of truth: the version the package was installed with (pyproject.toml)
    __version__ = _metadata.version("gradientmail")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a bare source tree
    __version__ = "0+unknown"

__all__ = [  # the errors come from errors.__all__, so they are listed once
    "BaseMailbox",
    "Capability",
    "Identity",
    "Mailbox",
    "Session",
    "SupportsCompareAndSwap",
    "SupportsListStartAfter",
    "Version",
    "__version__",
    "from_url",
    "identify",
    "learner_id",
    *_errors.__all__,
]
