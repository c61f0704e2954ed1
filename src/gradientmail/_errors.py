"""The gradientmail exception hierarchy.

Every exception gradientmail raises on purpose derives from :class:`GradientMailError`.
Where a builtin exception means the same thing, the class inherits it too, so both
``except KeyNotFoundError`` and ``except LookupError`` work::

    GradientMailError
    ├── ConfigurationError (ValueError)          bad URL, unknown scheme or option
    │   └── MissingDependencyError (ImportError)  an optional extra is not installed
    ├── InvalidKeyError (ValueError)              a key breaks a rule; names the rule
    ├── KeyNotFoundError (LookupError)            get() of a key that does not exist
    ├── InvalidDataError (TypeError)              a value is not bytes-like, or unusable
    ├── NotSupportedError (NotImplementedError)   a capability the backend lacks
    ├── AtomicityViolationError                   the store let two claimants win
    ├── LeaseLostError                            another learner took over this one's units
    ├── WorkerError                               a background loader/producer failed
    │   └── ProducerFailedError (+PipelineError)  a pipeline producer failed
    │       └── ProducerLostError                 its heartbeat lapsed: presumed dead
    ├── PipelineError                             a pipeline refused or stopped
    │   ├── ProducerRegistrationError (ValueError)  undeclared or twice-registered producer
    │   ├── PipelineStalledError (TimeoutError)   no progress for ``stall_timeout`` seconds
    │   └── PipelineAbortedError                  the pipeline was aborted
    └── BackendError                              the store failed; carries key and backend
        ├── TransientBackendError                 worth retrying (5xx, timeouts, conflicts)
        │   └── EndpointUnreachableError (ConnectionError)
        ├── BucketNotFoundError                   the bucket or container does not exist
        ├── AccessDeniedError (PermissionError)   credentials missing or refused
        └── OutcomeUnknownError                   a conditional write may or may not have landed

Backends map their SDK's exceptions into this tree at one boundary each, chaining the
original (``raise ... from exc``). Messages never contain credentials. Every error
gradientmail defines lives in this module; other modules re-export some of them where users
have imported them from before.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AccessDeniedError",
    "AtomicityViolationError",
    "BackendError",
    "BucketNotFoundError",
    "ConfigurationError",
    "EndpointUnreachableError",
    "ForeignRecordError",
    "GradientMailError",
    "InvalidDataError",
    "InvalidKeyError",
    "KeyNotFoundError",
    "LeaseLostError",
    "MissingDependencyError",
    "NotSupportedError",
    "OutcomeUnknownError",
    "PipelineAbortedError",
    "PipelineError",
    "PipelineStalledError",
    "ProducerFailedError",
    "ProducerLostError",
    "ProducerRegistrationError",
    "ProtocolError",
    "RunMismatchError",
    "TransientBackendError",
    "WorkerError",
]


class GradientMailError(Exception):
    """Root of every error gradientmail raises on purpose."""


class ConfigurationError(GradientMailError, ValueError):
    """A URL, scheme or option is malformed or unknown. The message lists what is accepted."""


class RunMismatchError(ConfigurationError):
    """The run at this URL has other units than this learner was given: it was refused.

    Raised before the learner claims anything; a :class:`~gradientmail.session.Session`
    left by it puts back the learner's record as it found it, so the run it was refused
    by shows no trace of it.
    """


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


class InvalidDataError(GradientMailError, TypeError):
    """A value is not bytes-like (``bytes``, ``bytearray`` or ``memoryview``), or is unusable.

    Also raised for a released ``memoryview`` and for a ``version`` that is not a
    :class:`~gradientmail.mailbox.Version`.
    """


class ForeignRecordError(GradientMailError, ValueError):
    """A key in a namespace a pattern owns holds bytes that pattern did not write.

    Raised instead of skipping the key, which would leave its unit (or item) unfinished
    and a learner waiting for it forever. ``key`` names the key (empty when the error was
    rebuilt from its message alone, as torch's DataLoader does).
    """

    def __init__(self, message: str, *, key: str = "") -> None:
        self.key = key
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_foreign_record_error, (str(self), self.key))


def _rebuild_foreign_record_error(message: str, key: str) -> ForeignRecordError:
    return ForeignRecordError(message, key=key)


class NotSupportedError(GradientMailError, NotImplementedError):
    """The backend does not declare the capability this call needs."""


class AtomicityViolationError(GradientMailError):
    """The store reported a win to two claimants of one key: it is not atomic.

    Raised by patterns (such as ``shared_queue``) that read a claim back and find another
    owner. Run ``gradientmail conformance URL`` against the store to see why.
    """


class LeaseLostError(GradientMailError):
    """This learner's lease lapsed and another learner took over its units.

    Raised by ``shared_queue`` in the training loop of a learner that was paused (SIGSTOP, a
    long garbage-collection pause, a network partition) for longer than its lease, or that
    was replaced by a newer incarnation with the same learner id. It delivers no further item
    of a unit it no longer owns and records no completion for one; the other learners finish
    those units. A pipeline consumer paused past its lease raises it too, naming the item
    that may have gone to another consumer.

    Attributes:
        learner: the learner (or pipeline consumer) id whose lease was lost.
        units: identifiers of the units (or items) that were taken over; may be empty when a
            newer incarnation fenced this one.
    """

    def __init__(self, message: str, *, learner: str = "", units: tuple[str, ...] = ()) -> None:
        self.learner = learner
        self.units = units
        super().__init__(message)


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


class ProtocolError(BackendError):
    """The store answered, but without what the protocol this backend relies on promises.

    For example a store behind ``gs://`` that sends no object generation: compare-and-swap
    and the read-back of every claim need it. The store is not one this backend can
    coordinate on, whatever else it does right; ``gradientmail conformance`` says FAIL.
    """


class TransientBackendError(BackendError):
    """A failure that may succeed on retry: a 5xx, a timeout, a dropped connection, a conflict.

    Attributes:
        not_carried_out: ``True`` when the request certainly had no effect: it was never
            sent, or the store answered that it did not carry it out (throttled, or in
            conflict with a concurrent request). ``False`` when it may have taken effect
            (a lost response, a timeout, a 500).
    """

    transient = True
    not_carried_out = False


class EndpointUnreachableError(TransientBackendError, ConnectionError):
    """Nothing answered at the endpoint (connection refused, DNS failure, timeout on connect)."""

    not_carried_out = True


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

    Built from a message alone, as torch's DataLoader rebuilds an error from one of its
    worker processes, the attributes are empty and the message says it all.
    """

    def __init__(
        self, message: str, *, worker: str = "", error_type: str = "", worker_traceback: str = ""
    ):
        self.worker = worker
        self.error_type = error_type
        self.worker_traceback = worker_traceback
        if worker_traceback:
            message = f"{message}\n\nTraceback in the worker thread:\n{worker_traceback}"
        super().__init__(message)


class PipelineError(GradientMailError):
    """Root of the errors a producer/consumer pipeline raises on purpose."""


class ProducerRegistrationError(PipelineError, ValueError):
    """A producer id was not declared, or has already registered (late registration)."""


class ProducerFailedError(WorkerError, PipelineError):
    """A producer failed; raised to consumers after every item that producer put.

    A :class:`WorkerError`, like a ``shared_queue`` loader's failure: in process the
    original exception is chained as ``__cause__``; from another process its type, message
    and traceback arrive as text.

    Attributes:
        producer: the producer's id.
        items: how many items the producer put before it failed.
        summary: the message without the traceback.
        error_type: the qualified name of the producer's exception.
        worker_traceback: the producer's traceback, as text.
    """

    def __init__(
        self,
        message: str,
        *,
        producer: str,
        items: int,
        error_type: str = "",
        worker_traceback: str = "",
    ) -> None:
        super().__init__(
            message,
            worker=f"producer {producer!r}",
            error_type=error_type,
            worker_traceback=worker_traceback or "(none: the producer reported no exception)\n",
        )
        self.summary = message
        self.producer = producer
        self.items = items

    @classmethod
    def after(
        cls, producer: str, items: int, error_type: str, message: str, worker_traceback: str
    ) -> ProducerFailedError:
        """The error for ``producer`` failing with ``error_type: message`` after ``items``."""
        described = f"{error_type}: {message}" if message else error_type
        return cls(
            f"producer {producer!r} failed after putting {items} item(s): {described}",
            producer=producer,
            items=items,
            error_type=error_type,
            worker_traceback=worker_traceback,
        )

    def copy(self) -> ProducerFailedError:
        """A fresh copy for another consumer thread (tracebacks must not be shared)."""
        copied = type(self)(
            self.summary,
            producer=self.producer,
            items=self.items,
            error_type=self.error_type,
            worker_traceback=self.worker_traceback,
        )
        copied.__cause__ = self.__cause__
        return copied


class ProducerLostError(ProducerFailedError):
    """A producer stopped renewing its lease for longer than the lease: presumed dead."""


class PipelineStalledError(PipelineError, TimeoutError):
    """No progress for ``stall_timeout`` seconds; the message names what was waited on."""


class PipelineAbortedError(PipelineError):
    """The pipeline was aborted or failed, so this producer's items can no longer be used."""
