"""The gradientmail exception hierarchy.

Every exception gradientmail raises on purpose derives from :class:`GradientMailError`.
Where a builtin exception means the same thing, the class inherits it too, so both
``except KeyNotFoundError`` and ``except LookupError`` work::

    GradientMailError
    ├── ConfigurationError (ValueError)          bad URL, unknown scheme or option
    │   └── MissingDependencyError (ImportError)  an optional extra is not installed
    ├── InvalidKeyError (ValueError)              a key breaks a rule; names the rule
    ├── KeyNotFoundError (LookupError)            get() of a key that does not exist
    ├── NotSupportedError (NotImplementedError)   a capability the backend lacks
    ├── AtomicityViolationError                   the store let two claimants win
    ├── WorkerError                               a background loader/producer failed
    └── BackendError                              the store failed; carries key and backend
        ├── TransientBackendError                 worth retrying (5xx, timeouts, conflicts)
        │   └── EndpointUnreachableError (ConnectionError)
        ├── BucketNotFoundError                   the bucket or container does not exist
        ├── AccessDeniedError (PermissionError)   credentials missing or refused
        └── OutcomeUnknownError                   a conditional write may or may not have landed

Backends map their SDK's exceptions into this tree in exactly one function each, chaining
the original (``raise ... from exc``). Messages never contain credentials.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "AtomicityViolationError",
    "BackendError",
    "BucketNotFoundError",
    "ConfigurationError",
    "EndpointUnreachableError",
    "GradientMailError",
    "InvalidKeyError",
    "KeyNotFoundError",
    "MissingDependencyError",
    "NotSupportedError",
    "OutcomeUnknownError",
    "TransientBackendError",
    "WorkerError",
]


class GradientMailError(Exception):
    """Root of every error gradientmail raises on purpose."""


class ConfigurationError(GradientMailError, ValueError):
    """A URL, scheme or option is malformed or unknown. The message lists what is accepted."""


class MissingDependencyError(ConfigurationError, ImportError):
    """A backend needs an optional extra that is not installed.

    The message names the exact ``pip install 'gradientmail[extra]'`` command.
    """

    def __init__(self, module: str, extra: str) -> None:
        self.module = module
        self.extra = extra
        super().__init__(
            f"this backend needs the Python package {module!r}, which is not installed; "
            f"install it with: pip install 'gradientmail[{extra}]'"
        )


class InvalidKeyError(GradientMailError, ValueError):
    """A key breaks one of the key rules. ``rule`` names which one."""

    def __init__(self, key: object, rule: str) -> None:
        self.key = key
        self.rule = rule
        shown = repr(key)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid key {shown}: {rule}")


class KeyNotFoundError(GradientMailError, LookupError):
    """The key does not exist in the mailbox."""

    def __init__(self, key: str, backend: str = "") -> None:
        self.key = key
        self.backend = backend
        where = f" in {backend}" if backend else ""
        super().__init__(f"key {key!r} not found{where}")


class NotSupportedError(GradientMailError, NotImplementedError):
    """The backend does not declare the capability this call needs."""


class AtomicityViolationError(GradientMailError):
    """The store reported a win to two claimants of one key: it is not atomic.

    Raised by patterns (such as ``shared_queue``) that read a claim back and find another
    owner. Run ``gradientmail conformance URL`` against the store to see why.
    """


class BackendError(GradientMailError):
    """The store failed an operation.

    Attributes:
        key: the key the operation was about, or ``None`` for bucket-level calls.
        backend: a description of the mailbox (its URL, never with credentials).
        transient: ``True`` when retrying the same call may succeed.
    """

    transient = False

    def __init__(self, message: str, *, key: str | None = None, backend: str = "") -> None:
        self.key = key
        self.backend = backend
        parts = [message]
        if key is not None:
            parts.append(f"key={key!r}")
        if backend:
            parts.append(f"backend={backend}")
        super().__init__(" | ".join(parts))


class TransientBackendError(BackendError):
    """A failure that may succeed on retry: a 5xx, a timeout, a dropped connection, a conflict."""

    transient = True


class EndpointUnreachableError(TransientBackendError, ConnectionError):
    """Nothing answered at the endpoint (connection refused, DNS failure, timeout on connect)."""


class BucketNotFoundError(BackendError):
    """The bucket or container named in the URL does not exist."""


class AccessDeniedError(BackendError, PermissionError):
    """Credentials are missing, invalid, or not allowed to do this."""


class OutcomeUnknownError(BackendError):
    """A conditional write may or may not have been stored, and reading back could not tell.

    gradientmail raises this instead of guessing: it never reports ``False`` for a write
    that may have landed. The caller may read the key to find out later.
    """


class WorkerError(GradientMailError):
    """A background worker (a loader or producer thread) failed.

    Raised in the consumer's thread, after every item the worker produced before failing.
    The original exception is chained as ``__cause__``; ``worker_traceback`` holds the
    worker thread's traceback as text (it is also at the end of the message).

    Attributes:
        worker: who failed, e.g. ``"shared_queue loader of learner 'node-0'"``.
        error_type: the original exception's qualified type name.
        worker_traceback: the worker's formatted traceback.
    """

    def __init__(self, message: str, *, worker: str, error_type: str, worker_traceback: str):
        self.worker = worker
        self.error_type = error_type
        self.worker_traceback = worker_traceback
        super().__init__(f"{message}\n\nTraceback in the worker thread:\n{worker_traceback}")
