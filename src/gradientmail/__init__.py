"""gradientmail: coordinate training nodes through the object store you already have.

Public names only. ``import gradientmail`` imports no cloud SDK and no torch: backends and
patterns load their dependencies when first used.
"""

from __future__ import annotations

from gradientmail.backends.base import BaseMailbox
from gradientmail.errors import (
    AccessDeniedError,
    AtomicityViolationError,
    BackendError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    GradientMailError,
    InvalidDataError,
    InvalidKeyError,
    KeyNotFoundError,
    LeaseLostError,
    MissingDependencyError,
    NotSupportedError,
    OutcomeUnknownError,
    TransientBackendError,
    WorkerError,
)
from gradientmail.mailbox import Capability, Mailbox, SupportsCompareAndSwap, Version
from gradientmail.session import Session
from gradientmail.urls import from_url

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
    "AtomicityViolationError",
    "BackendError",
    "BaseMailbox",
    "BucketNotFoundError",
    "Capability",
    "ConfigurationError",
    "EndpointUnreachableError",
    "GradientMailError",
    "InvalidDataError",
    "InvalidKeyError",
    "KeyNotFoundError",
    "LeaseLostError",
    "Mailbox",
    "MissingDependencyError",
    "NotSupportedError",
    "OutcomeUnknownError",
    "Session",
    "SupportsCompareAndSwap",
    "TransientBackendError",
    "Version",
    "WorkerError",
    "__version__",
    "from_url",
]
