"""``gs://bucket/prefix`` (alias ``gcs://``): a mailbox in Google Cloud Storage.

URL and options
    ``gs://BUCKET`` or ``gs://BUCKET/PREFIX``. Keys are stored as objects named
    ``PREFIX/KEY``; the bucket must already exist. ``GCSMailbox(bucket, prefix, **options)``
    opens one directly.

    * ``project`` (str): the project for the client; by default the credentials' project.
    * ``emulator_host`` (str): an emulator endpoint such as ``http://127.0.0.1:4443``. An
      anonymous client is used. Defaults to the ``STORAGE_EMULATOR_HOST`` environment
      variable, which the SDK also honours.
    * ``connect_timeout`` (float seconds, default 3) and ``read_timeout`` (float seconds,
      default 60) bound every request.

    Without an emulator, credentials come from the standard Google chain (Application
    Default Credentials: ``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth
    application-default login``, or the metadata server). They never appear in a ``repr``
    or an error message. A mailbox pickles as its URL and these options, none of them a
    credential, and reopens with a fresh client in the receiving process.

Errors
    :meth:`GCSMailbox._map_error` is the one place SDK exceptions become gradientmail
    errors: a missing bucket raises ``BucketNotFoundError``, missing or refused credentials
    ``AccessDeniedError``, nothing listening at the endpoint ``EndpointUnreachableError``,
    5xx / 429 / 408 / timeouts / dropped connections ``TransientBackendError``.

Requests per call
    The SDK's own retries are off (``retry=None`` on every call); the shared
    :class:`~gradientmail.backends.RetryPolicy` (``attempts`` = 5 by default) makes
    every retry. With ``A`` attempts, one call sends at most:

    * ``put``: ``A`` uploads; ``get``, ``get_versioned``, ``delete``: ``A`` requests, plus
      one bucket lookup per attempt the first time a key is found missing (GCS answers 404
      for a missing bucket and a missing object alike): ``2A``;
    * ``put_if_absent``, ``put_if_match``: ``A`` conditional uploads, then, if an attempt
      was ambiguous (its response lost), one read-back and its retries: ``2A`` in all;
    * ``list``: ``A`` per page of up to :data:`PAGE_SIZE` names;
    * ``list(prefix, start_after=k)``: ``A`` per page of up to :data:`PAGE_SIZE` names,
      counted from ``k``: every page carries ``startOffset`` (the object name of ``k``), so
      the names before ``k`` cost nothing. ``startOffset`` is inclusive; a name equal to it
      is dropped here. ``GCSMailbox`` declares ``Capability.LIST_START_AFTER``.

    Values over 8 MiB are uploaded as a resumable upload: a few requests per attempt.

Guarantees
    * ``put_if_absent`` is an upload with ``ifGenerationMatch=0``: GCS itself refuses a
      second object, so exactly one concurrent creator wins, across machines.
    * Compare-and-swap uses the object generation as the :class:`Version` token
      (``ifGenerationMatch=<generation>``). Generations never repeat for an object name.
    * Every write carries a fresh write id in the object metadata
      (``gradientmail_write_id``), so an ambiguous conditional write is decided by reading
      it back (see :class:`~gradientmail.backends.BaseMailbox`).
    * Nothing listening at the endpoint fails within about a second.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, ClassVar

from gradientmail import _errors as errors
from gradientmail.backends._base import Conflict, Stat
from gradientmail.backends._object_store import PAGE_SIZE, ObjectStoreMailbox, StoreURL
from gradientmail.backends._options import require
from gradientmail.mailbox import Capability, Version

__all__ = ["PAGE_SIZE", "WRITE_ID_METADATA", "GCSMailbox"]

#: The object metadata field holding the write id of the write that stored the object.
WRITE_ID_METADATA = "gradientmail_write_id"

_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


# -- URL and options ---------------------------------------------------------------------------

# 3-222 characters of lowercase letters, digits, '-', '_' and '.', starting and ending with
# a letter or digit (the GCS naming rules, without the per-dot-part limit).
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_BUCKET_RULE = "3-222 lowercase letters, digits, '-', '_' or '.'"


def _endpoint(value: object) -> str:
    text = str(value).strip().rstrip("/")
    if not text:
        raise ValueError("expected an endpoint such as http://127.0.0.1:4443")
    # STORAGE_EMULATOR_HOST is often given as host:port; emulators speak plain HTTP.
    return text if "://" in text else "http://" + text


_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "project": str,
    "emulator_host": _endpoint,
}


# -- the mailbox -------------------------------------------------------------------------------


class GCSMailbox(ObjectStoreMailbox):
    """A mailbox in a GCS bucket; see the module docstring for options and guarantees."""

    layout = StoreURL("gs", "GCS", "bucket", _BUCKET_NAME, _BUCKET_RULE)
    accepted_options = _OPTIONS
    write_id_metadata = WRITE_ID_METADATA
    capabilities: ClassVar[frozenset[Capability]] = ObjectStoreMailbox.capabilities | {
        Capability.LIST_START_AFTER
    }

    # -- the client ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        """The SDK's bucket handle on a new client (no request is sent)."""
        sdk = require("google.cloud.storage", "gcs")
        from google.auth.credentials import AnonymousCredentials
        from requests.adapters import HTTPAdapter

        self._bucket_exists = False
        emulator = self._emulator_endpoint()
        self._endpoint = emulator or "storage.googleapis.com"
        project = self._settings.get("project")
        try:
            if emulator:
                client = sdk.Client(
                    project=project,  # None: no project lookup against an emulator
                    credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]  # unannotated in google-auth
                    client_options={"api_endpoint": emulator},
                )
            else:
                client = sdk.Client(project=project) if project else sdk.Client()
        except OSError as exc:
            # google-cloud-core: "Project was not passed and could not be determined".
            raise errors.ConfigurationError(
                f"no Google Cloud project for {self.url}: pass the project option "
                f"(e.g. {self.url}?project=my-project) or set GOOGLE_CLOUD_PROJECT"
            ) from exc
        # This SDK version fetches bucket metadata for tracing in background threads, with
        # its own 120 s retry: extra requests we neither want nor can bound. Switch it off.
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            client._bucket_metadata_cache = None
        # Size the pool for many threads sharing one mailbox (requests keeps 10 by default),
        # unless google-auth mounted its own mutual-TLS adapter.
        if not getattr(client._http, "is_mtls", False):
            adapter = HTTPAdapter(
                pool_connections=4, pool_maxsize=self.pool_connections, max_retries=0
            )
            client._http.mount("https://", adapter)
            client._http.mount("http://", adapter)
        return client.bucket(self.container)

    def _disconnect(self, client: Any) -> None:
        client.client.close()

    def _emulator_endpoint(self) -> str | None:
        emulator: str | None = self._settings.get("emulator_host")
        if emulator:
            return emulator
        from_env = os.environ.get(_EMULATOR_ENV, "").strip()
        return _endpoint(from_env) if from_env else None

    # -- errors -------------------------------------------------------------------------------

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
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

    def _map_error(self, exc: BaseException, key: str | None) -> errors.GradientMailError:
        """The one place SDK and transport exceptions become gradientmail errors.

        A 404 reaching this function means the bucket is missing: operations that can see a
        404 for a missing key handle it before.
        """
        import requests
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth
        from google.cloud.storage import exceptions as storage_errors
        from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

        emulator = f"the emulator settings ({_EMULATOR_ENV} / the emulator_host option)"
        if isinstance(exc, api.NotFound):
            return self._bucket_missing(key)
        if isinstance(exc, auth.InvalidOperation):
            # A 401 made the transport refresh the credentials, which anonymous ones cannot.
            message = (
                "GCS refused the request (HTTP 401) and the anonymous credentials used for "
                f"{self._endpoint} cannot be refreshed; check that the emulator allows "
                f"anonymous access, or unset {emulator} to use real credentials"
            )
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, auth.DefaultCredentialsError):
            message = (
                "no Google Cloud credentials found; run `gcloud auth application-default "
                "login`, set GOOGLE_APPLICATION_CREDENTIALS to a key file, or use "
                f"{emulator} to reach an emulator"
            )
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, (auth.RefreshError, api.Unauthorized, api.Forbidden)):
            status = f"HTTP {exc.code}" if isinstance(exc, api.GoogleAPICallError) else "refused"
            message = (
                f"GCS refused the credentials ({status}); check that they are valid and that "
                f"the account may read and write objects in bucket {self.container!r} "
                "(e.g. roles/storage.objectUser)"
            )
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, api.GoogleAPICallError):
            code = int(exc.code or 0)
            said = f"HTTP {code} {type(exc).__name__}"
            if isinstance(exc, (api.TooManyRequests, api.ServerError)) or code == 408:
                return self._transient(code, said, key)
            return self._failure(errors.BackendError, key, f"GCS answered {said}")
        if isinstance(exc, requests.ConnectTimeout) or (
            isinstance(exc, requests.ConnectionError)
            and exc.args
            and isinstance(exc.args[0], MaxRetryError)
            and isinstance(exc.args[0].reason, (NewConnectionError, ConnectTimeoutError))
        ):
            # The connection was never made, so the request was never sent.
            return self._unreachable(key, f"check the network, or that {emulator} are right")
        if isinstance(exc, (requests.RequestException, auth.TransportError)):
            return self._interrupted(exc, key)
        if isinstance(exc, storage_errors.DataCorruption):
            message = "a GCS transfer failed its checksum; retrying may succeed"
            return self._failure(errors.TransientBackendError, key, message)
        return self._failure(
            errors.BackendError, key, f"the GCS client failed ({type(exc).__name__})"
        )

    def _bucket_missing(self, key: str | None) -> errors.BucketNotFoundError:
        message = (
            f"bucket {self.container!r} does not exist; create it (gcloud storage buckets "
            f"create gs://{self.container}) or fix the URL"
        )
        return self._failure(errors.BucketNotFoundError, key, message)

    def _check_bucket(self, key: str | None) -> None:
        """Raise ``BucketNotFoundError`` if the bucket is missing (checked once per client).

        GCS answers 404 for a missing object and a missing bucket alike, so a 404 on a key
        is only reported as a missing key once the bucket is known to exist.
        """
        if self._bucket_exists:
            return
        with self._mapped(key):
            exists = self._client().exists(retry=None, timeout=self._timeouts)
        if not exists:
            raise self._bucket_missing(key)
        self._bucket_exists = True

    # -- operations ---------------------------------------------------------------------------

    def _upload(self, key: str, data: bytes, write_id: str, generation: int | None) -> Version:
        blob = self._client().blob(self._name(key))
        blob.metadata = self._stamp(write_id)
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=generation,
            retry=None,
            timeout=self._timeouts,
        )
        return self._generation_of(blob, key)

    def _conditional_upload(
        self, key: str, data: bytes, write_id: str, generation: int
    ) -> Version | Conflict:
        from google.api_core.exceptions import PreconditionFailed

        with self._mapped(key):
            try:
                return self._upload(key, data, write_id, generation)
            except PreconditionFailed:
                # The SDK does not retry (retry=None), so this answers our only request.
                return Conflict.LOST

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
        with self._mapped(key):
            self._upload(key, data, write_id, None)

    def _read(self, key: str) -> tuple[bytes, Version]:
        from google.api_core.exceptions import NotFound

        blob = self._client().blob(self._name(key))
        with self._mapped(key):
            try:
                data = blob.download_as_bytes(retry=None, timeout=self._timeouts)
            except NotFound:
                self._check_bucket(key)
                raise errors.KeyNotFoundError(key, self.url) from None
        return data, self._generation_of(blob, key)

    def _generation_of(self, blob: Any, key: str) -> Version:
        """The object's generation as its version; a store that sent none breaks gs://."""
        if blob.generation is None:
            raise errors.ProtocolError(
                "the store sent no generation with the object: gs:// needs GCS object "
                "generations for compare-and-swap and for reading every claim back, so this "
                "store cannot be coordinated on through gs://",
                key=key,
                backend=self.url,
            )
        return Version(str(blob.generation))

    def _stat(self, key: str) -> Stat | None:
        with self._mapped(key):
            blob = self._client().get_blob(self._name(key), retry=None, timeout=self._timeouts)
        if blob is None:
            return None
        return self._stat_of(blob.generation, blob.metadata)

    def _delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        with self._mapped(key):
            try:
                self._client().blob(self._name(key)).delete(retry=None, timeout=self._timeouts)
            except NotFound:
                self._check_bucket(key)  # a missing key is fine; a missing bucket is not

    def _list_page(
        self, names: str, token: str | None, *, start_after: str | None = None
    ) -> tuple[list[str], str | None]:
        bucket = self._client()
        # startOffset is inclusive: the caller drops a name equal to start_after. It is sent
        # with every page, as the SDK's own iterator does, so the page token always comes
        # back to the query that made it.
        iterator = bucket.client.list_blobs(
            self.container,
            prefix=names,
            start_offset=start_after or None,
            page_size=self.page_size,
            page_token=token,
            fields="items(name),nextPageToken",
            retry=None,
            timeout=self._timeouts,
        )
        for page in iterator.pages:
            return [blob.name for blob in page], iterator.next_page_token
        return [], None
