"""``s3://bucket/prefix``: a mailbox in Amazon S3 or any S3-compatible store, with boto3.

URL and options
    ``s3://BUCKET`` or ``s3://BUCKET/PREFIX``. Keys are stored as objects named
    ``PREFIX/KEY``; the bucket must already exist.

    * ``endpoint_url`` (str): an S3-compatible endpoint such as ``http://127.0.0.1:9000``.
      Without it boto3 uses ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` or the config
      file, and otherwise AWS itself.
    * ``region`` (str): the region for signing; by default the SDK's (``AWS_REGION``,
      ``AWS_DEFAULT_REGION``, the config file).
    * ``profile`` (str): a named profile from ``~/.aws/config``.

    Credentials come from the standard boto3 chain (environment, config files, SSO,
    instance metadata...). They are never taken from the URL, and never appear in a
    ``repr`` or an error message. A mailbox pickles as its URL and these options, and
    reopens with a fresh client in the receiving process.

Errors
    :func:`_map_error` is the one place boto3/botocore exceptions become gradientmail
    errors: ``NoSuchBucket`` raises ``BucketNotFoundError``; missing or refused
    credentials ``AccessDeniedError``; nothing listening at the endpoint
    ``EndpointUnreachableError`` (within a few seconds: a short connect timeout and a
    bounded number of attempts); 5xx, throttling, timeouts, dropped connections and
    409 ``ConditionalRequestConflict`` ``TransientBackendError``, which
    :class:`~gradientmail.mailbox.BaseMailbox` retries with jittered backoff.

Guarantees
    * ``put_if_absent`` is ``PutObject`` with ``If-None-Match: *``: the store itself
      refuses a second object, so exactly one concurrent creator wins, across machines.
    * Compare-and-swap uses the object's ETag as the :class:`Version` token
      (``If-Match: <etag>``).
    * Every write carries a fresh write id (32 hex digits) twice: in the object metadata
      (``x-amz-meta-gm-write-id``), for reading back, and appended to the stored bytes.
      S3 ETags are hashes of the stored bytes, so without the trailer rewriting identical
      bytes would repeat a version, and a stale token would match. ``get`` strips the
      trailer; objects written by other tools (without the metadata field) read as stored.
      Other S3 clients reading the bucket directly see the 32 extra bytes.
    * botocore retries dropped connections and 5xx itself;
      a 412 that answers a retried request (or a request after a possibly delivered one)
      is reported as ``Conflict.AFTER_RETRY``, and the key is read back to decide.
    * ``list`` uses ``ListObjectsV2`` pages, fetched lazily one at a time; keys outside
      gradientmail's key rules (such as ``dir/`` markers written by other tools) are
      skipped.
    * The client's connection pool holds :data:`POOL_CONNECTIONS` connections, so that
      many threads share one mailbox without waiting for a connection.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from gradientmail.backends.base import BaseMailbox, Conflict, Stat
from gradientmail.backends.options import parse_options, require, split_store_url
from gradientmail.errors import (
    AccessDeniedError,
    BackendError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    GradientMailError,
    InvalidKeyError,
    KeyNotFoundError,
    TransientBackendError,
)
from gradientmail.keys import validate_key
from gradientmail.mailbox import Capability, Version

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

__all__ = ["CONNECT_TIMEOUT", "POOL_CONNECTIONS", "SDK_ATTEMPTS", "WRITE_ID_METADATA", "S3Mailbox"]

#: User metadata field holding the write id (sent as ``x-amz-meta-gm-write-id``).
WRITE_ID_METADATA = "gm-write-id"
#: HTTP connections kept per client: racing threads each hold one.
POOL_CONNECTIONS = 64
#: Seconds to wait for a TCP connection before the attempt counts as unreachable.
CONNECT_TIMEOUT = 2.0
#: Seconds to wait for a response once the request is sent.
READ_TIMEOUT = 60.0
#: Attempts botocore makes per call (its "standard" mode: 5xx, throttling, dropped
#: connections). Kept small so an unreachable endpoint fails fast; the shared
#: RetryPolicy retries transient failures on top.
SDK_ATTEMPTS = 3

# 3-63 characters of lowercase letters, digits, '.', '-' and '_' (the last for older and
# S3-compatible stores), starting and ending with a letter or digit.
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")

_ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
        "403",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "ConditionalRequestConflict",
        "InternalError",
        "OperationAborted",
        "RequestTimeout",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
    }
)


# -- URL and options ---------------------------------------------------------------------------


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


_OPTIONS = {"endpoint_url": _endpoint_option, "region": _name_option, "profile": _name_option}


def _parse_url(url: str) -> tuple[str, str]:
    """Return (bucket, prefix) of an ``s3://`` URL, or raise ``ConfigurationError``."""
    return split_store_url(
        url,
        store="S3",
        container="bucket",
        name=_BUCKET_NAME,
        name_rule="3-63 lowercase letters, digits, '.', '-' or '_', starting and ending with "
        "a letter or digit; a port or host belongs in the endpoint_url option",
        example="e.g. s3://my-bucket/run1",
    )


# -- clients -----------------------------------------------------------------------------------

# One boto3 Session per (process, profile): creating a Session costs ~100 ms, a client from
# an existing one ~10 ms. Sessions are not thread-safe, so clients are made under a lock.
# A Session resolves credentials once and keeps them (refreshable ones refresh themselves).
_SESSIONS: dict[tuple[int, str | None], Any] = {}
_SESSIONS_LOCK = threading.Lock()


def _new_client(endpoint_url: str | None, region: str | None, profile: str | None) -> S3Client:
    boto3 = require("boto3", "s3")
    config_module = require("botocore.config", "s3")
    config = config_module.Config(
        max_pool_connections=POOL_CONNECTIONS,
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=READ_TIMEOUT,
        retries={"mode": "standard", "total_max_attempts": SDK_ATTEMPTS},
        user_agent_extra="gradientmail",
    )
    with _SESSIONS_LOCK:
        session_key = (os.getpid(), profile)
        session = _SESSIONS.get(session_key)
        if session is None:
            session = boto3.session.Session(profile_name=profile)
            _SESSIONS[session_key] = session
        client: S3Client = session.client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config
        )
    return client


class _Attempts(threading.local):
    """Per thread: how many attempts of the current call may have reached the store."""

    def __init__(self) -> None:
        self.delivered = 0


def _safe_endpoint(endpoint: str | None) -> str:
    """The endpoint for messages: scheme, host and port only."""
    if not endpoint:
        return "AWS S3"
    parts = urlsplit(endpoint)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


# -- errors ------------------------------------------------------------------------------------


def _map_error(exc: Exception, key: str | None, where: str, endpoint: str) -> GradientMailError:
    """The one place boto3/botocore exceptions become gradientmail errors.

    Args:
        exc: the SDK's exception.
        key: the key the call was about, or ``None``.
        where: the mailbox URL (never with credentials).
        endpoint: the endpoint for messages, already stripped by :func:`_safe_endpoint`.
    """
    from botocore import exceptions as bx

    bucket = where.removeprefix("s3://").split("/", 1)[0]
    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode", 0) or 0)
        said = f"{code or status}: {error.get('Message') or 'no message'}"
        if code == "NoSuchBucket":
            return BucketNotFoundError(
                f"bucket {bucket!r} does not exist at {endpoint} ({said}); create it, or "
                "fix the bucket name in the URL or the endpoint_url option",
                key=key,
                backend=where,
            )
        if code in _ACCESS_CODES or status == 403:
            return AccessDeniedError(
                f"{endpoint} refused the credentials for bucket {bucket!r} ({said}); check "
                "the AWS credentials (environment, profile option, ~/.aws) and the bucket "
                "policy",
                key=key,
                backend=where,
            )
        if code in _TRANSIENT_CODES or status >= 500 or status in (408, 429):
            return TransientBackendError(
                f"{endpoint} answered a transient error ({said}); retrying may succeed",
                key=key,
                backend=where,
            )
        return BackendError(f"{endpoint} answered {status} ({said})", key=key, backend=where)
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return AccessDeniedError(
            f"no usable AWS credentials were found ({type(exc).__name__}); set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, configure ~/.aws/credentials, or "
            "pass the profile option",
            key=key,
            backend=where,
        )
    if isinstance(exc, (bx.CredentialRetrievalError, bx.UnknownCredentialError)):
        return AccessDeniedError(
            f"the AWS credential provider failed ({type(exc).__name__}); check the "
            "credential configuration of the profile in use",
            key=key,
            backend=where,
        )
    if isinstance(exc, bx.InvalidRegionError):
        return ConfigurationError(f"the region option is not a valid AWS region name ({exc})")
    if isinstance(exc, bx.ProfileNotFound):
        return ConfigurationError(
            f"the AWS profile named in the profile option or AWS_PROFILE does not exist "
            f"({exc}); list profiles with `aws configure list-profiles` (mailbox {where})"
        )
    if isinstance(exc, bx.SSLError):
        return BackendError(
            f"TLS to {endpoint} failed ({type(exc).__name__}); check the endpoint_url "
            "scheme and the CA bundle (AWS_CA_BUNDLE)",
            key=key,
            backend=where,
        )
    if isinstance(
        exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ProxyConnectionError)
    ):
        return EndpointUnreachableError(
            f"nothing answered at {endpoint} ({type(exc).__name__}); check the "
            "endpoint_url option or AWS_ENDPOINT_URL, and that the store is running",
            key=key,
            backend=where,
        )
    if isinstance(exc, (bx.HTTPClientError, bx.ConnectionError, bx.IncompleteReadError)):
        return TransientBackendError(
            f"the connection to {endpoint} failed mid-request ({type(exc).__name__}); "
            "retrying may succeed",
            key=key,
            backend=where,
        )
    if isinstance(exc, bx.ParamValidationError):
        return BackendError(f"boto3 rejected the request: {exc}", key=key, backend=where)
    return BackendError(f"boto3 failed ({type(exc).__name__}: {exc})", key=key, backend=where)


def _status(exc: Exception) -> tuple[int, str]:
    """HTTP status and error code of a ``ClientError``; ``(0, "")`` for anything else."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return 0, ""
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return status, str(response.get("Error", {}).get("Code", ""))


# -- the mailbox -------------------------------------------------------------------------------


class S3Mailbox(BaseMailbox):
    """A mailbox under a prefix of one S3 bucket; see the module docstring for guarantees."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.SHARED_ACROSS_PROCESSES}
    )

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
    ) -> None:
        options = {
            name: value
            for name, value in (
                ("endpoint_url", endpoint_url),
                ("region", region),
                ("profile", profile),
            )
            if value is not None
        }
        super().__init__(f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}", options)
        self.bucket = bucket
        self.prefix = prefix
        self._base = f"{prefix}/" if prefix else ""
        self.object_name_prefix = self._base  # S3 limits prefix + key to 1024 bytes
        self._endpoint_url = endpoint_url
        self._region = region
        self._profile = profile
        self._attempts = _Attempts()
        self._client_lock = threading.Lock()
        self._client_pid = 0
        self._client_ref: S3Client | None = None
        self._client()  # fail at open on a bad profile, not on first use

    @classmethod
    def open(cls, url: str, **options: Any) -> S3Mailbox:
        """Open ``s3://bucket/prefix``.

        Raises:
            ConfigurationError: a malformed URL or bucket name, or an unknown or invalid
                option (the message lists the accepted ones), or an unknown profile.
            MissingDependencyError: boto3 is not installed (``pip install 'gradientmail[s3]'``).
        """
        opts = parse_options("s3", options, _OPTIONS)
        bucket, prefix = _parse_url(url)
        require("boto3", "s3")
        return cls(bucket, prefix, **opts)

    # -- client, errors ---------------------------------------------------------------------

    def _client(self) -> S3Client:
        """This process's client, made on first use (and again after a fork or close)."""
        client = self._client_ref
        if client is None or self._client_pid != os.getpid():
            with self._client_lock:
                client = self._client_ref
                if client is None or self._client_pid != os.getpid():
                    try:
                        client = _new_client(self._endpoint_url, self._region, self._profile)
                    except Exception as exc:
                        raise self._map_error(exc, None) from exc
                    client.meta.events.register(
                        "response-received.s3.PutObject", self._count_attempt
                    )
                    self._client_ref = client
                    self._client_pid = os.getpid()
        return client

    def _count_attempt(self, exception: Exception | None = None, **_: Any) -> None:
        """botocore calls this after each attempt of a PutObject, in the calling thread."""
        from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

        # A refused or timed-out connection never carried the request; anything else may
        # have reached the store, even if its response was lost.
        if not isinstance(exception, (EndpointConnectionError, ConnectTimeoutError)):
            self._attempts.delivered += 1

    def _endpoint(self) -> str:
        client = self._client_ref
        endpoint = client.meta.endpoint_url if client is not None else self._endpoint_url
        return _safe_endpoint(endpoint)

    def _map_error(self, exc: Exception, key: str | None) -> GradientMailError:
        return _map_error(exc, key, self.url, self._endpoint())

    def close(self) -> None:
        """Close the client's connections; a new client is made if the mailbox is used again."""
        with self._client_lock:
            client, self._client_ref = self._client_ref, None
        if client is not None and self._client_pid == os.getpid():
            client.close()

    def _name(self, key: str) -> str:
        return self._base + key

    def _put_request(self, key: str, data: bytes, write_id: str) -> dict[str, Any]:
        """PutObject arguments storing ``data`` stamped with ``write_id``.

        The write id goes into the metadata (for read-back) and after the value (so that
        the ETag, a hash of the stored bytes, differs for every write).
        """
        return {
            "Bucket": self.bucket,
            "Key": self._name(key),
            "Body": data + write_id.encode("ascii"),
            "Metadata": {WRITE_ID_METADATA: write_id},
        }

    # -- primitives -------------------------------------------------------------------------

    def _conditional_put(
        self, key: str, data: bytes, write_id: str, condition: dict[str, str]
    ) -> Version | Conflict:
        """PutObject with an ``IfNoneMatch`` or ``IfMatch`` condition, outcome classified."""
        client = self._client()
        self._attempts.delivered = 0
        try:
            response = client.put_object(**self._put_request(key, data, write_id), **condition)  # type: ignore[arg-type]
        except Exception as exc:
            status, code = _status(exc)
            # 412: the precondition failed. 404 on If-Match: the key is gone (a stale version).
            if status == 412 or ("IfMatch" in condition and code in ("NoSuchKey", "404")):
                # If an earlier attempt of this call may have reached the store, the
                # object that failed our precondition may be our own.
                return Conflict.AFTER_RETRY if self._attempts.delivered > 1 else Conflict.LOST
            error = self._map_error(exc, key)
            if isinstance(error, EndpointUnreachableError) and self._attempts.delivered:
                # The last attempt could not connect, but an earlier one may have landed.
                raise TransientBackendError(
                    f"{error}; an earlier attempt of this write may have reached the store",
                    key=key,
                    backend=self.url,
                ) from exc
            raise error from exc
        return Version(response["ETag"])

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        return self._conditional_put(key, data, write_id, {"IfNoneMatch": "*"})

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        return self._conditional_put(key, data, write_id, {"IfMatch": version.token})

    def _read(self, key: str) -> tuple[bytes, Version]:
        try:
            response = self._client().get_object(Bucket=self.bucket, Key=self._name(key))
            with response["Body"] as body:
                data = body.read()
        except Exception as exc:
            if _status(exc) == (404, "NoSuchKey"):
                raise KeyNotFoundError(key, self.url) from None
            raise self._map_error(exc, key) from exc
        write_id = response.get("Metadata", {}).get(WRITE_ID_METADATA)
        if write_id is not None:  # written by gradientmail: strip the write-id trailer
            trailer = write_id.encode("ascii", "replace")
            if not data.endswith(trailer):
                raise BackendError(
                    f"object {self._name(key)!r} carries a {WRITE_ID_METADATA} metadata field "
                    "but not the matching trailer; it was changed outside gradientmail",
                    key=key,
                    backend=self.url,
                )
            data = data[: len(data) - len(trailer)]
        return data, Version(response["ETag"])

    def _stat(self, key: str) -> Stat | None:
        try:
            response = self._client().head_object(Bucket=self.bucket, Key=self._name(key))
        except Exception as exc:
            # HEAD carries no error body: a 404 is a missing key (a missing bucket would
            # have failed the write that led here).
            if _status(exc)[0] == 404:
                return None
            raise self._map_error(exc, key) from exc
        return Stat(Version(response["ETag"]), response.get("Metadata", {}).get(WRITE_ID_METADATA))

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        try:
            self._client().put_object(**self._put_request(key, data, write_id))
        except Exception as exc:
            raise self._map_error(exc, key) from exc

    def _delete(self, key: str) -> None:
        try:
            self._client().delete_object(Bucket=self.bucket, Key=self._name(key))
        except Exception as exc:
            if _status(exc) == (404, "NoSuchKey"):  # S3 says 204; some stores say 404
                return
            raise self._map_error(exc, key) from exc

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        client = self._client()
        paginator = client.get_paginator("list_objects_v2")
        start = len(self._base)
        pages = paginator.paginate(Bucket=self.bucket, Prefix=self._base + prefix)
        iterator = iter(pages)
        while True:
            try:
                page = next(iterator)
            except StopIteration:
                return
            except Exception as exc:
                raise self._map_error(exc, None) from exc
            for entry in page.get("Contents", ()):
                key = entry["Key"][start:]
                try:
                    validate_key(key)
                except InvalidKeyError:
                    continue  # e.g. "dir/" markers or "a//b" written by other tools
                yield key
