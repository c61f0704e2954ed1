"""The options of ``s3://`` mailboxes, and the one boto3 client they configure.

:data:`OPTIONS` checks each option the S3 backend accepts; :func:`new_client` turns the
checked options into this process's boto3 client. The options, and the values each
S3-compatible store needs, are listed in :mod:`gradientmail.backends.s3` and
``docs/s3-compatible.md``.

How the client's botocore ``Config`` is made, lowest precedence first:

1. gradientmail's defaults: :data:`CONNECT_TIMEOUT`, :data:`READ_TIMEOUT`,
   :data:`POOL_CONNECTIONS` connections, ``user_agent_extra="gradientmail"``;
2. the ``config`` option (a ``botocore.config.Config``), whose explicit settings replace
   those defaults;
3. the named options given (``connect_timeout``, ``read_timeout``, ``max_pool_connections``,
   ``addressing_style``, ``signature_version``), which replace the ``config``'s; the
   addressing style joins the ``config``'s other ``s3`` settings;
4. always: one attempt per call (:data:`SDK_ATTEMPTS`), whatever ``config`` says. The shared
   retry policy makes every retry, so a refused conditional write answers the only request
   sent.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gradientmail._errors import ConfigurationError
from gradientmail.backends._object_store import POOL_CONNECTIONS
from gradientmail.backends._options import require

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

__all__ = [
    "ADDRESSING_STYLES",
    "CONNECT_TIMEOUT",
    "DEFAULTS",
    "OPTIONS",
    "POOL_CONNECTIONS",
    "READ_TIMEOUT",
    "SDK_ATTEMPTS",
    "SIGNATURE_VERSIONS",
    "new_client",
]

#: Default seconds to wait for a TCP connection before the attempt counts as unreachable.
CONNECT_TIMEOUT = 2.0
#: Default seconds to wait for a response once the request is sent.
READ_TIMEOUT = 60.0
#: Attempts botocore makes per call: one. The shared RetryPolicy makes every retry, so a
#: precondition failure always answers the only request of its attempt.
SDK_ATTEMPTS = 1
#: ``addressing_style`` values: botocore's choice (path-style for an ``endpoint_url``,
#: virtual-hosted on AWS), ``bucket.host/key``, or ``host/bucket/key``.
ADDRESSING_STYLES = ("auto", "virtual", "path")
#: ``signature_version`` values: SigV4 (botocore's default), or the legacy SigV2 that some
#: older S3-compatible stores need.
SIGNATURE_VERSIONS = ("s3v4", "s3")


# -- checking options --------------------------------------------------------------------------


def _endpoint_option(value: object) -> str:
    text = str(value)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL such as http://127.0.0.1:9000")
    if parts.username is not None or parts.password is not None:
        # Never hold a secret where repr, pickles or messages could reach it.
        raise ValueError(
            "the endpoint URL must not carry credentials; use the standard AWS credential "
            "chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, ...)"
        )
    return text


def _name_option(value: object) -> str:
    text = str(value)
    if not text or text != text.strip():
        raise ValueError(f"expected a non-empty name without surrounding spaces, got {text!r}")
    return text


def _one_of(choices: tuple[str, ...]) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = str(value).strip().lower()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return text

    return check


def _pool_option(value: object) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise ValueError(f"expected a whole number of connections, at least 1, got {value!r}")
    return int(text)


def _python_object(value: object, module: str, kind: str) -> Any:
    """``value`` if it is an instance of ``module``'s ``kind``; refuse text (from a URL)."""
    if isinstance(value, str):
        raise ValueError(
            f"expected a {module}.{kind} object as a keyword argument; it cannot be given "
            "in the URL's query"
        )
    expected = getattr(require(module, "s3"), kind)
    if not isinstance(value, expected):
        raise ValueError(f"expected a {module}.{kind}, not {type(value).__name__}")
    return value


def _session_option(value: object) -> Any:
    return _python_object(value, "boto3.session", "Session")


def _config_option(value: object) -> Any:
    return _python_object(value, "botocore.config", "Config")


#: Every S3 option besides ``connect_timeout`` / ``read_timeout`` (which every object store
#: accepts): name → converter.
OPTIONS: Mapping[str, Callable[[Any], Any]] = {
    "endpoint_url": _endpoint_option,
    "region": _name_option,
    "profile": _name_option,
    "addressing_style": _one_of(ADDRESSING_STYLES),
    "signature_version": _one_of(SIGNATURE_VERSIONS),
    "max_pool_connections": _pool_option,
    "session": _session_option,
    "config": _config_option,
}
#: Values of the options not given.
DEFAULTS: Mapping[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT,
    "read_timeout": READ_TIMEOUT,
    "max_pool_connections": POOL_CONNECTIONS,
}


# -- the client --------------------------------------------------------------------------------

# One boto3 Session per (process, profile): creating a Session costs ~100 ms, a client from
# an existing one ~10 ms. Sessions are not thread-safe, so clients are made under a lock
# (a Session passed in by the caller too). A Session resolves credentials once and keeps
# them (refreshable ones refresh themselves).
_SESSIONS: dict[tuple[int, str | None], Any] = {}
_SESSIONS_LOCK = threading.Lock()


def _reset_sessions_lock() -> None:
    global _SESSIONS_LOCK  # a forked child must not inherit a lock held by another thread
    _SESSIONS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_reset_sessions_lock)


def _config(settings: Mapping[str, Any], given: Collection[str]) -> Any:
    """The botocore ``Config``, merged as the module docstring says."""
    config_module = require("botocore.config", "s3")
    config = config_module.Config(
        connect_timeout=DEFAULTS["connect_timeout"],
        read_timeout=DEFAULTS["read_timeout"],
        max_pool_connections=DEFAULTS["max_pool_connections"],
        user_agent_extra="gradientmail",
    )
    theirs = settings.get("config")
    if theirs is not None:
        config = config.merge(theirs)
    named: dict[str, Any] = {
        name: settings[name]
        for name in ("connect_timeout", "read_timeout", "max_pool_connections", "signature_version")
        if name in given
    }
    if "addressing_style" in given:
        named["s3"] = {**(config.s3 or {}), "addressing_style": settings["addressing_style"]}
    named["retries"] = {"mode": "standard", "total_max_attempts": SDK_ATTEMPTS}
    return config.merge(config_module.Config(**named))


def new_client(settings: Mapping[str, Any], given: Collection[str]) -> S3Client:
    """A client for the checked ``settings``; ``given`` names the options the caller gave.

    Raises:
        ConfigurationError: both ``session`` and ``profile`` were given.
        MissingDependencyError: boto3 is not installed.
    """
    boto3 = require("boto3", "s3")
    config = _config(settings, given)
    session = settings.get("session")
    profile = settings.get("profile")
    if session is not None and profile is not None:
        raise ConfigurationError(
            "give either the session option or the profile option, not both: a boto3 "
            "Session already names its profile"
        )
    with _SESSIONS_LOCK:
        if session is None:
            session_key = (os.getpid(), profile)
            session = _SESSIONS.get(session_key)
            if session is None:
                session = boto3.session.Session(profile_name=profile)
                _SESSIONS[session_key] = session
        client: S3Client = session.client(
            "s3",
            endpoint_url=settings.get("endpoint_url"),
            region_name=settings.get("region"),
            config=config,
        )
    return client
