"""``gs://bucket/prefix`` (alias ``gcs://``): a mailbox in Google Cloud Storage.

URL and options
    ``gs://BUCKET`` or ``gs://BUCKET/PREFIX``. Keys are stored as objects named
    ``PREFIX/KEY``; the bucket must already exist.

    * ``project`` (str): the project for the client; by default the credentials' project.
    * ``emulator_host`` (str): an emulator endpoint such as ``http://127.0.0.1:4443``. An
      anonymous client is used. Defaults to the ``STORAGE_EMULATOR_HOST`` environment
      variable, which the SDK also honours.
    * ``connect_timeout`` (float seconds, default 3) and ``read_timeout`` (float seconds,
      default 60) bound every request.

    Without an emulator, credentials come from the standard Google chain (Application
    Default Credentials: ``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth
    application-default login``, or the metadata server). They never appear in a ``repr``
    or an error message.

Errors
    :meth:`GCSMailbox._map_error` is the one place SDK exceptions become gradientmail
    errors: a missing bucket raises ``BucketNotFoundError``, missing or refused credentials
    ``AccessDeniedError``, nothing listening at the endpoint ``EndpointUnreachableError``,
    5xx / 429 / 408 / timeouts / dropped connections ``TransientBackendError``.

Guarantees
    * ``put_if_absent`` is an upload with ``ifGenerationMatch=0``: GCS itself refuses a
      second object, so exactly one concurrent creator wins, across machines.
    * Compare-and-swap uses the object generation as the :class:`Version` token
      (``ifGenerationMatch=<generation>``). Generations never repeat for an object name.
    * Every write carries a fresh write id in the object metadata
      (``gradientmail_write_id``), so an ambiguous conditional write is decided by reading
      it back (see :class:`~gradientmail.mailbox.BaseMailbox`).
    * The SDK's own retries are switched off (``retry=None`` on every call): the shared
      :class:`~gradientmail.mailbox.RetryPolicy` sees every attempt, so a 412 answering the
      only request sent is a certain loss, and a 412 after a retried attempt is read back.
      Nothing listening at the endpoint fails within about a second.
    * ``list`` fetches one page of up to :data:`PAGE_SIZE` names per request, lazily.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar

from gradientmail.backends.base import BaseMailbox, Conflict, Stat
from gradientmail.backends.options import parse_options, require, split_store_url
from gradientmail.errors import (
    AccessDeniedError,
    BackendError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    KeyNotFoundError,
    TransientBackendError,
)
from gradientmail.mailbox import Capability, Version

__all__ = ["PAGE_SIZE", "WRITE_ID_METADATA", "GCSMailbox"]

#: Object names fetched per listing request.
PAGE_SIZE = 1000
#: The object metadata field holding the write id of the write that stored the object.
WRITE_ID_METADATA = "gradientmail_write_id"

_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# Bucket names: 3-222 characters of lowercase letters, digits, '-', '_' and '.', starting
# and ending with a letter or digit (the GCS naming rules, without the per-dot-part limit).
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_POOL_SIZE = 64  # connections kept per host: racing threads each hold one


def _positive_float(value: Any) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return number


def _endpoint(value: object) -> str:
    text = str(value).strip().rstrip("/")
    if not text:
        raise ValueError("expected an endpoint such as http://127.0.0.1:4443")
    # STORAGE_EMULATOR_HOST is often given as host:port; emulators speak plain HTTP.
    return text if "://" in text else "http://" + text


_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "project": str,
    "emulator_host": _endpoint,
    "connect_timeout": _positive_float,
    "read_timeout": _positive_float,
}
_DEFAULTS = {"connect_timeout": 3.0, "read_timeout": 60.0}


class GCSMailbox(BaseMailbox):
    """A mailbox in a GCS bucket; see the module docstring for options and guarantees."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.SHARED_ACROSS_PROCESSES}
    )

    def __init__(self, url: str, bucket: str, prefix: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        settings = parse_options("gs", options, _OPTIONS, _DEFAULTS)
        self.bucket = bucket
        self.prefix = prefix  # "" or ending in "/"
        self.object_name_prefix = prefix
        self._project: str | None = settings.get("project")
        self._emulator: str | None = settings.get("emulator_host")
        self._timeout = (settings["connect_timeout"], settings["read_timeout"])
        self._lock = threading.Lock()
        self._handle: Any = None  # the SDK Bucket, created on first use
        self._bucket_exists = False
        self._sdk = require("google.cloud.storage", "gcs")
        self._connect()  # surfaces missing credentials at open time

    @classmethod
    def open(cls, url: str, **options: Any) -> GCSMailbox:
        """Open ``gs://bucket/prefix``.

        Raises:
            ConfigurationError: a malformed URL or an unknown or invalid option.
            MissingDependencyError: google-cloud-storage is not installed.
            AccessDeniedError: no credentials were found (and no emulator is configured).
        """
        parse_options("gs", options, _OPTIONS)
        bucket, prefix = split_store_url(
            url,
            store="GCS",
            container="bucket",
            name=_BUCKET_NAME,
            name_rule="3-222 lowercase letters, digits, '-', '_' or '.'",
            example="e.g. gs://my-bucket/run1",
        )
        return cls(url, bucket, prefix + "/" if prefix else "", options)

    # -- the client -------------------------------------------------------------------------

    def _connect(self) -> Any:
        """The SDK bucket handle, creating the client on first use (thread-safe)."""
        handle = self._handle
        if handle is not None:
            return handle
        with self._lock:
            if self._handle is None:
                try:
                    self._handle = self._make_client().bucket(self.bucket)
                except self._sdk_errors() as exc:
                    raise self._map_error(exc, None) from exc
                except OSError as exc:
                    # google-cloud-core: "Project was not passed and could not be determined".
                    raise ConfigurationError(
                        f"no Google Cloud project for {self.url}: pass the project option "
                        f"(e.g. {self.url}?project=my-project) or set GOOGLE_CLOUD_PROJECT"
                    ) from exc
            return self._handle

    def _make_client(self) -> Any:
        from google.auth.credentials import AnonymousCredentials
        from requests.adapters import HTTPAdapter

        emulator = self._emulator_endpoint()
        if emulator:
            client = self._sdk.Client(
                project=self._project,  # None: no project lookup against an emulator
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]  # unannotated in google-auth
                client_options={"api_endpoint": emulator},
            )
        elif self._project:
            client = self._sdk.Client(project=self._project)
        else:
            client = self._sdk.Client()
        # This SDK version fetches bucket metadata for tracing in background threads, with
        # its own 120 s retry: extra requests we neither want nor can bound. Switch it off.
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
        # Size the pool for many threads sharing one mailbox (requests keeps 10 by default),
        # unless google-auth mounted its own mutual-TLS adapter.
        if not getattr(client._http, "is_mtls", False):
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=_POOL_SIZE, max_retries=0)
            client._http.mount("https://", adapter)
            client._http.mount("http://", adapter)
        return client

    def _emulator_endpoint(self) -> str | None:
        if self._emulator:
            return self._emulator
        from_env = os.environ.get(_EMULATOR_ENV, "").strip()
        return _endpoint(from_env) if from_env else None

    def close(self) -> None:
        """Close the client's connections; the next operation opens a new client."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.client.close()

    # -- errors -----------------------------------------------------------------------------

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions the SDK and its transport raise, which ``_map_error`` translates."""
        import requests
        from google.api_core.exceptions import GoogleAPICallError
        from google.auth.exceptions import GoogleAuthError
        from google.cloud.storage import exceptions as storage_errors

        return (
            GoogleAPICallError,
            GoogleAuthError,
            requests.RequestException,
            storage_errors.InvalidResponse,
            storage_errors.DataCorruption,
        )

    def _map_error(self, exc: BaseException, key: str | None) -> BackendError:
        """Turn an SDK or transport exception into a gradientmail error (the only place).

        A 404 reaching this function means the bucket is missing: operations that can see a
        404 for a missing key handle it before calling this.
        """
        import requests
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth
        from google.cloud.storage import exceptions as storage_errors
        from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

        where = self.url
        if isinstance(exc, api.NotFound):
            return self._bucket_missing(key)
        if isinstance(exc, auth.InvalidOperation):
            # A 401 made the transport refresh the credentials, which anonymous ones cannot.
            return AccessDeniedError(
                "GCS refused the request (HTTP 401) and the anonymous credentials used for "
                f"{self._emulator_endpoint() or 'GCS'} cannot be refreshed; check that the "
                "emulator allows anonymous access, or unset the emulator settings "
                f"({_EMULATOR_ENV} / emulator_host) to use real credentials",
                key=key,
                backend=where,
            )
        if isinstance(exc, auth.DefaultCredentialsError):
            return AccessDeniedError(
                "no Google Cloud credentials found; run `gcloud auth application-default "
                "login`, set GOOGLE_APPLICATION_CREDENTIALS to a key file, or set "
                f"{_EMULATOR_ENV} (or the emulator_host option) to use an emulator",
                key=key,
                backend=where,
            )
        if isinstance(exc, (auth.RefreshError, api.Unauthorized, api.Forbidden)):
            status = f"HTTP {exc.code}" if isinstance(exc, api.GoogleAPICallError) else "refused"
            return AccessDeniedError(
                f"GCS refused the credentials ({status}); check that they are valid and that "
                f"the account may read and write objects in bucket {self.bucket!r} "
                "(e.g. roles/storage.objectUser)",
                key=key,
                backend=where,
            )
        if isinstance(exc, (api.TooManyRequests, api.ServerError)) or (
            isinstance(exc, api.GoogleAPICallError) and exc.code == 408
        ):
            return TransientBackendError(
                f"GCS answered HTTP {exc.code} (transient); retry later", key=key, backend=where
            )
        if isinstance(exc, api.GoogleAPICallError):
            return BackendError(
                f"GCS answered HTTP {exc.code} {type(exc).__name__}",
                key=key,
                backend=where,
            )
        if isinstance(exc, requests.ConnectTimeout) or (
            isinstance(exc, requests.ConnectionError)
            and exc.args
            and isinstance(exc.args[0], MaxRetryError)
            and isinstance(exc.args[0].reason, (NewConnectionError, ConnectTimeoutError))
        ):
            # The connection was never made, so the request was never sent.
            endpoint = self._emulator_endpoint() or "storage.googleapis.com"
            return EndpointUnreachableError(
                f"nothing answered at {endpoint}; check the network, or that the emulator "
                f"is running ({_EMULATOR_ENV} / the emulator_host option)",
                key=key,
                backend=where,
            )
        if isinstance(exc, (requests.RequestException, auth.TransportError)):
            # Sent, but the response was lost or timed out: the request may have landed.
            return TransientBackendError(
                f"the connection to GCS failed mid-request ({type(exc).__name__}); retry later",
                key=key,
                backend=where,
            )
        if isinstance(exc, storage_errors.DataCorruption):
            return TransientBackendError(
                "a GCS transfer failed its checksum; retry", key=key, backend=where
            )
        return BackendError(f"the GCS client failed ({type(exc).__name__})", key=key, backend=where)

    def _bucket_missing(self, key: str | None) -> BucketNotFoundError:
        return BucketNotFoundError(
            f"bucket {self.bucket!r} does not exist; create it (gcloud storage buckets "
            f"create gs://{self.bucket}) or fix the URL",
            key=key,
            backend=self.url,
        )

    def _check_bucket(self, key: str | None) -> None:
        """Raise ``BucketNotFoundError`` if the bucket is missing (checked once per handle).

        GCS answers 404 for a missing object and a missing bucket alike, so a 404 on a key
        is only reported as a missing key once the bucket is known to exist.
        """
        if self._bucket_exists:
            return
        try:
            exists = self._connect().exists(retry=None, timeout=self._timeout)
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc
        if not exists:
            raise self._bucket_missing(key)
        self._bucket_exists = True

    # -- operations -------------------------------------------------------------------------

    def _upload(self, key: str, data: bytes, write_id: str, generation: int | None) -> Version:
        blob = self._connect().blob(self.prefix + key)
        blob.metadata = {WRITE_ID_METADATA: write_id}
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=generation,
            retry=None,
            timeout=self._timeout,
        )
        return Version(str(blob.generation))

    def _conditional_upload(
        self, key: str, data: bytes, write_id: str, generation: int
    ) -> Version | Conflict:
        from google.api_core.exceptions import PreconditionFailed

        try:
            return self._upload(key, data, write_id, generation)
        except PreconditionFailed:
            # The SDK does not retry (retry=None), so this answers our only request.
            return Conflict.LOST
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        return self._conditional_upload(key, data, write_id, 0)

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        try:
            generation = int(version.token)
        except ValueError:
            return Conflict.LOST  # not a GCS generation, so it cannot be the current one
        if generation <= 0:
            return Conflict.LOST  # 0 would mean "create if absent"
        return self._conditional_upload(key, data, write_id, generation)

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        try:
            self._upload(key, data, write_id, None)
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc

    def _read(self, key: str) -> tuple[bytes, Version]:
        from google.api_core.exceptions import NotFound

        blob = self._connect().blob(self.prefix + key)
        try:
            data = blob.download_as_bytes(retry=None, timeout=self._timeout)
        except NotFound:
            self._check_bucket(key)
            raise KeyNotFoundError(key, self.url) from None
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc
        if blob.generation is None:
            raise BackendError("GCS sent no generation with the object", key=key, backend=self.url)
        return data, Version(str(blob.generation))

    def _stat(self, key: str) -> Stat | None:
        try:
            blob = self._connect().get_blob(self.prefix + key, retry=None, timeout=self._timeout)
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc
        if blob is None:
            return None
        write_id = (blob.metadata or {}).get(WRITE_ID_METADATA)
        return Stat(Version(str(blob.generation)), write_id)

    def _delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self._connect().blob(self.prefix + key).delete(retry=None, timeout=self._timeout)
        except NotFound:
            self._check_bucket(key)  # a missing key is fine; a missing bucket is not
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc

    def _iter_keys(self, prefix: str) -> Iterator[str]:
        full = self.prefix + prefix
        start = len(self.prefix)
        token: str | None = None
        while True:
            names, token = self._with_retries(prefix, partial(self._list_page, full, token))
            for name in names:
                yield name[start:]
            if not token:
                return

    def _list_page(self, full: str, token: str | None) -> tuple[list[str], str | None]:
        """One page of object names under ``full`` and the token for the next page."""
        try:
            iterator = self._connect().client.list_blobs(
                self.bucket,
                prefix=full,
                page_size=PAGE_SIZE,
                page_token=token,
                fields="items(name),nextPageToken",
                retry=None,
                timeout=self._timeout,
            )
            for page in iterator.pages:
                return [blob.name for blob in page], iterator.next_page_token
            return [], None
        except self._sdk_errors() as exc:
            raise self._map_error(exc, None) from exc
