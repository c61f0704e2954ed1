"""``s3://bucket/prefix``: a mailbox in Amazon S3 or any S3-compatible store, with boto3.

URL and options
    ``s3://BUCKET`` or ``s3://BUCKET/PREFIX``. Keys are stored as objects named
    ``PREFIX/KEY``; the bucket must already exist. ``S3Mailbox(bucket, prefix, **options)``
    opens one directly. These options may be keyword arguments or URL query parameters:

    * ``endpoint_url`` (str): an S3-compatible endpoint such as ``http://127.0.0.1:9000``.
      Without it boto3 uses ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` or the config
      file, and otherwise AWS itself.
    * ``region`` (str): the region for signing; by default the SDK's (``AWS_REGION``,
      ``AWS_DEFAULT_REGION``, the config file).
    * ``profile`` (str): a named profile from ``~/.aws/config``.
    * ``connect_timeout`` (float seconds, default 2) and ``read_timeout`` (float seconds,
      default 60) bound every request.
    * ``addressing_style``: ``auto`` (the default: path-style with an ``endpoint_url``,
      virtual-hosted on AWS), ``path`` (``host/bucket/key``) or ``virtual``
      (``bucket.host/key``).
    * ``signature_version``: ``s3v4`` (SigV4, botocore's default) or ``s3`` (the legacy
      SigV2, for older stores that need it).
    * ``max_pool_connections`` (int, default 64): HTTP connections the client keeps, so that
      as many threads share one mailbox without waiting for a connection.

    Two more are Python objects, given as keyword arguments only (never in the URL):

    * ``session``: a ``boto3.session.Session`` to make the client from (its credentials,
      profile and region), instead of gradientmail's own session from the standard chain.
      Not with ``profile``.
    * ``config``: a ``botocore.config.Config``, for settings without an option of their own
      (proxies, checksums, TCP keep-alive...). gradientmail's defaults yield to it, the
      named options above override it, and its retry settings are always replaced: one
      attempt per call, the shared retry policy makes every retry.

    ``docs/s3-compatible.md`` lists the values MinIO, Cloudflare R2, Ceph RGW and SeaweedFS
    need, and maps each option to its fsspec/s3fs name.

    Credentials come from the standard boto3 chain (environment, config files, SSO,
    instance metadata...), or from ``session``. They are never taken from the URL, and
    never appear in a ``repr`` or an error message.

Pickling
    A mailbox pickles as its URL and options, and reopens with a fresh client in the
    receiving process. No credential travels. A ``config`` travels as it is (with its
    proxies, if it names any). A ``session`` does not travel: the copy makes its client
    from the standard chain, as if opened without ``session``, so a worker process must
    find its credentials there (environment, profile, instance role) or open its own
    mailbox with a session of its own.

    botocore's own ``DEBUG`` log holds every request's headers, so it holds the AWS session
    token (``X-Amz-Security-Token``) and the request signatures. gradientmail never enables
    it; an application that sets the root logger, or the ``botocore`` / ``boto3`` loggers,
    to ``DEBUG`` (``logging.basicConfig(level=logging.DEBUG)``,
    ``boto3.set_stream_logger()``) writes those secrets to its logs.

Errors
    :meth:`S3Mailbox._map_error` is the one place botocore exceptions become gradientmail
    errors: ``NoSuchBucket`` raises ``BucketNotFoundError``; missing or refused
    credentials ``AccessDeniedError``; nothing listening at the endpoint
    ``EndpointUnreachableError``; 5xx, throttling, timeouts, dropped connections and
    409 ``ConditionalRequestConflict`` ``TransientBackendError``; an unknown profile or an
    invalid region ``ConfigurationError``.

Requests per call
    botocore's own retries are off (one attempt per call); the shared
    :class:`~gradientmail.backends.RetryPolicy` (``attempts`` = 5 by default) makes
    every retry. With ``A`` attempts, one call sends at most:

    * ``get``, ``get_versioned``, ``put``, ``delete``: ``A`` requests;
    * ``put_if_absent``, ``put_if_match``: ``A`` conditional PUTs, then, if an attempt was
      ambiguous (its response lost), one HEAD read-back and its retries: ``2A`` in all;
    * ``list``: ``A`` per page of up to 1000 keys;
    * ``list(prefix, start_after=k)``: ``A`` per page of up to 1000 keys, counted from
      ``k``: the first page is a ``ListObjectsV2`` with ``StartAfter`` (the object name of
      ``k``), so the keys before ``k`` cost nothing. ``S3Mailbox`` declares
      ``Capability.LIST_START_AFTER``.

Guarantees
    * Objects hold exactly the bytes given to ``put``, ``put_if_absent`` or
      ``put_if_match``: boto3, the AWS CLI or any other reader sees those bytes. Objects
      written by other tools are read as stored and can be swapped with ``put_if_match``.
    * ``put_if_absent`` is ``PutObject`` with ``If-None-Match: *``: the store itself
      refuses a second object, so exactly one concurrent creator wins, across machines.
    * Compare-and-swap uses the object's ETag as the :class:`Version` token
      (``If-Match: <etag>``). **An S3 version names the bytes stored, not one write**: the
      ETag of a single-part upload is a hash of its bytes, so two writes of identical bytes
      may share a version. A version never matches different bytes, but after a key is
      rewritten with the bytes it held before, an old version matches again (ABA).
      Compare-and-swap on S3 is safe when every value written carries something unique to
      its write, as gradientmail's own claims, leases and records do (a fresh token, or a
      sequence number that only grows). :attr:`S3Mailbox.versions_name_bytes` declares
      this, and ``gradientmail conformance`` checks S3 against it.
    * Every write carries a fresh write id (32 hex digits) in the object metadata
      (``x-amz-meta-gm-write-id``), which ``HEAD`` returns without the value: a conditional
      write whose response was lost is resolved by reading it back. Objects without it
      (written by other tools) are simply not ours.
    * ``list`` uses ``ListObjectsV2`` pages, fetched lazily one at a time, in the store's
      order: UTF-8 byte order, which is the order of Python strings.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from gradientmail import _errors as errors
from gradientmail.backends._base import Conflict, Stat
from gradientmail.backends._object_store import ObjectStoreMailbox, StoreURL
from gradientmail.backends._options import redact
from gradientmail.backends._s3_client import (
    CONNECT_TIMEOUT,
    DEFAULTS,
    OPTIONS,
    POOL_CONNECTIONS,
    SDK_ATTEMPTS,
    new_client,
)
from gradientmail.mailbox import Capability, Version

if TYPE_CHECKING:
    from collections.abc import Callable

    from mypy_boto3_s3.client import S3Client

__all__ = ["CONNECT_TIMEOUT", "POOL_CONNECTIONS", "SDK_ATTEMPTS", "WRITE_ID_METADATA", "S3Mailbox"]

#: User metadata field holding the write id (sent as ``x-amz-meta-gm-write-id``). S3
#: metadata travels in HTTP headers, where some proxies drop names with '_'.
WRITE_ID_METADATA = "gm-write-id"


# -- URL and options ---------------------------------------------------------------------------
# The options are checked, and the client made, in gradientmail.backends._s3_client.

# 3-63 lowercase letters, digits, '.', '-' and '_' (the last for older and S3-compatible
# stores), starting and ending with a letter or digit.
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_BUCKET_RULE = (
    "3-63 lowercase letters, digits, '.', '-' or '_', starting and ending with a letter or "
    "digit; a port or host belongs in the endpoint_url option"
)


# -- errors ------------------------------------------------------------------------------------

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


def _status(exc: BaseException) -> tuple[int, str]:
    """HTTP status and error code of a ``ClientError``; ``(0, "")`` for anything else."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return 0, ""
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return status, str(response.get("Error", {}).get("Code", ""))


# -- the mailbox -------------------------------------------------------------------------------


class S3Mailbox(ObjectStoreMailbox):
    """A mailbox under a prefix of one S3 bucket; see the module docstring for guarantees."""

    layout = StoreURL("s3", "S3", "bucket", _BUCKET_NAME, _BUCKET_RULE)
    accepted_options = OPTIONS
    write_id_metadata = WRITE_ID_METADATA
    option_defaults = DEFAULTS
    capabilities: ClassVar[frozenset[Capability]] = ObjectStoreMailbox.capabilities | {
        Capability.LIST_START_AFTER
    }
    #: An S3 version is the ETag, which names the bytes stored (see the module docstring).
    versions_name_bytes: ClassVar[bool] = True

    # -- the client ---------------------------------------------------------------------------

    def _connect(self) -> S3Client:
        client = new_client(self._settings, self._options.keys())
        self._endpoint = redact(client.meta.endpoint_url) if client.meta.endpoint_url else "AWS S3"
        return client

    def _disconnect(self, client: Any) -> None:
        client.close()

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, dict[str, Any]]]:
        # A boto3 Session cannot travel (it may hold credentials): the copy makes its client
        # from the standard chain, as the module docstring says.
        restore, (url, options) = super().__reduce__()
        return restore, (url, {k: v for k, v in options.items() if k != "session"})

    # -- errors -------------------------------------------------------------------------------

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        from botocore.exceptions import BotoCoreError, ClientError
        from urllib3.exceptions import HTTPError

        # urllib3's errors can escape botocore while a response body is being read.
        return (ClientError, BotoCoreError, HTTPError)

    def _map_error(self, exc: BaseException, key: str | None) -> errors.GradientMailError:
        """The one place botocore exceptions become gradientmail errors."""
        from botocore import exceptions as bx

        endpoint, bucket = self._endpoint, self.container
        if isinstance(exc, bx.ClientError):
            status, code = _status(exc)
            said = f"{code or status}: {exc.response.get('Error', {}).get('Message') or '-'}"
            if code == "NoSuchBucket":
                return self._failure(
                    errors.BucketNotFoundError,
                    key,
                    f"bucket {bucket!r} does not exist at {endpoint} ({said}); create it, or "
                    "fix the bucket name in the URL or the endpoint_url option",
                )
            if code in _ACCESS_CODES or status == 403:
                fix = "the AWS credentials (environment, profile option, ~/.aws) and the policy"
                message = f"{endpoint} refused the credentials for bucket {bucket!r} ({said})"
                return self._failure(errors.AccessDeniedError, key, f"{message}; check {fix}")
            if code in _TRANSIENT_CODES or status >= 500 or status in (408, 429):
                return self._transient(status, f"{status} at {endpoint} ({said})", key)
            return self._failure(errors.BackendError, key, f"{endpoint} answered {status} ({said})")
        kind = type(exc).__name__
        if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
            fix = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws/credentials or a profile"
            message = f"no usable AWS credentials were found ({kind}); set {fix}"
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, (bx.CredentialRetrievalError, bx.UnknownCredentialError)):
            message = f"the AWS credential provider failed ({kind}); check the profile in use"
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, bx.InvalidRegionError):
            return errors.ConfigurationError(
                f"the region option is not a valid AWS region name ({exc})"
            )
        if isinstance(exc, bx.ProfileNotFound):
            return errors.ConfigurationError(
                f"the AWS profile named in the profile option or AWS_PROFILE does not exist "
                f"({exc}); list profiles with `aws configure list-profiles` (mailbox {self.url})"
            )
        if isinstance(exc, bx.SSLError):
            fix = "check the endpoint_url scheme and the CA bundle (AWS_CA_BUNDLE)"
            return self._failure(
                errors.BackendError, key, f"TLS to {endpoint} failed ({kind}); {fix}"
            )
        if isinstance(
            exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ProxyConnectionError)
        ):
            fix = "check the endpoint_url option or AWS_ENDPOINT_URL, and that the store runs"
            return self._unreachable(key, fix)
        if isinstance(exc, bx.ParamValidationError):
            return self._failure(errors.BackendError, key, f"boto3 rejected the request: {exc}")
        if isinstance(exc, bx.BotoCoreError) and not isinstance(
            exc, (bx.HTTPClientError, bx.ConnectionError, bx.IncompleteReadError)
        ):
            return self._failure(errors.BackendError, key, f"boto3 failed ({kind}: {exc})")
        # A connection that failed mid-request, from botocore or (while a body is being
        # read) from urllib3 itself.
        return self._interrupted(exc, key)

    # -- operations ---------------------------------------------------------------------------

    def _put_request(self, key: str, data: bytes, write_id: str) -> dict[str, Any]:
        """PutObject arguments storing exactly ``data``, with ``write_id`` in the metadata."""
        return {
            "Bucket": self.container,
            "Key": self._name(key),
            "Body": data,
            "Metadata": self._stamp(write_id),
        }

    def _conditional_put(
        self, key: str, data: bytes, write_id: str, condition: dict[str, str]
    ) -> Version | Conflict:
        """PutObject with an ``IfNoneMatch`` or ``IfMatch`` condition, outcome classified."""
        from botocore.exceptions import ClientError

        with self._mapped(key):
            try:
                request = self._put_request(key, data, write_id)
                response = self._client().put_object(**request, **condition)
            except ClientError as exc:
                status, code = _status(exc)
                # 412: the precondition failed. 404 on If-Match: the key is gone (a stale
                # version). botocore does not retry, so this answers our only request.
                if status == 412 or ("IfMatch" in condition and code in ("NoSuchKey", "404")):
                    return Conflict.LOST
                raise
        return Version(response["ETag"])

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        return self._conditional_put(key, data, write_id, {"IfNoneMatch": "*"})

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        return self._conditional_put(key, data, write_id, {"IfMatch": version.token})

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        with self._mapped(key):
            self._client().put_object(**self._put_request(key, data, write_id))

    def _read(self, key: str) -> tuple[bytes, Version]:
        from botocore.exceptions import ClientError

        with self._mapped(key):
            try:
                response = self._client().get_object(Bucket=self.container, Key=self._name(key))
            except ClientError as exc:
                if _status(exc) == (404, "NoSuchKey"):
                    raise errors.KeyNotFoundError(key, self.url) from None
                raise
            with response["Body"] as body:
                data = body.read()
        return data, Version(response["ETag"])

    def _stat(self, key: str) -> Stat | None:
        from botocore.exceptions import ClientError

        with self._mapped(key):
            try:
                response = self._client().head_object(Bucket=self.container, Key=self._name(key))
            except ClientError as exc:
                # HEAD carries no error body: a 404 is a missing key (a missing bucket
                # would have failed the write that led here).
                if _status(exc)[0] == 404:
                    return None
                raise
        return self._stat_of(response["ETag"], response.get("Metadata"))

    def _delete(self, key: str) -> None:
        from botocore.exceptions import ClientError

        with self._mapped(key):
            try:
                self._client().delete_object(Bucket=self.container, Key=self._name(key))
            except ClientError as exc:
                if _status(exc) != (404, "NoSuchKey"):  # S3 says 204; some stores say 404
                    raise

    def _list_page(
        self, names: str, token: str | None, *, start_after: str | None = None
    ) -> tuple[list[str], str | None]:
        # StartAfter places the first page; the continuation token carries on from there.
        page: dict[str, str] = {}
        if token:
            page["ContinuationToken"] = token
        elif start_after:
            page["StartAfter"] = start_after
        response = self._client().list_objects_v2(
            Bucket=self.container, Prefix=names, MaxKeys=self.page_size, **page
        )
        found = [entry["Key"] for entry in response.get("Contents", ())]
        return found, response.get("NextContinuationToken") if response.get("IsTruncated") else None
