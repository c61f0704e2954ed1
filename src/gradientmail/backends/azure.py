"""``az://container/prefix``: a mailbox in Azure Blob Storage.

URL and options
    ``az://CONTAINER`` or ``az://CONTAINER/PREFIX``. Keys are stored as block blobs named
    ``PREFIX/KEY``; the container must already exist. ``AzureMailbox(container, prefix,
    **options)`` opens one directly. The storage account comes from, in this order:

    * ``connection_string`` (str): an account connection string;
    * ``account_url`` (str): e.g. ``https://ACCOUNT.blob.core.windows.net``. A SAS token in
      its query is used as is; otherwise credentials come from ``azure-identity``'s
      ``DefaultAzureCredential`` when that package is installed (it is not a dependency);
    * the ``AZURE_STORAGE_CONNECTION_STRING`` environment variable.

    ``connect_timeout`` (float seconds, default 3) and ``read_timeout`` (float seconds,
    default 60) bound every request.

Secrets
    Pass ``connection_string`` and ``account_url`` as keyword arguments, or set
    ``AZURE_STORAGE_CONNECTION_STRING``; never in the URL's query. A query is decoded as a
    form, where ``+`` means a space and ``&`` separates options, so a key or SAS put there
    arrives damaged (and URLs are copied into logs and shell histories). An account key or
    SAS signature holding a space, which a real one never does, is refused with a
    ``ConfigurationError`` saying so, rather than failing later as refused credentials.

    Connection strings, account keys and SAS tokens never appear in a ``repr``, an error
    message or a log line written by gradientmail: messages name the mailbox URL and at
    most the account endpoint without its query. A mailbox pickles as its URL and options,
    so a mailbox opened with ``connection_string``, or an ``account_url`` holding a SAS
    token, carries that account key or SAS, in clear, in its pickle: worker processes can
    reopen it, and anyone who reads the pickle can use it.

Errors
    :meth:`AzureMailbox._map_error` is the one place SDK exceptions become gradientmail
    errors: a missing container raises ``BucketNotFoundError``, refused or missing
    credentials ``AccessDeniedError``, nothing listening at the endpoint
    ``EndpointUnreachableError``, 5xx / 429 / 408 / timeouts / dropped connections
    ``TransientBackendError``.

Requests per call
    The SDK's own retries are off (``retry_total=0``, and none in the HTTP adapter); the
    shared :class:`~gradientmail.backends.RetryPolicy` (``attempts`` = 5 by default)
    makes every retry. With ``A`` attempts, one call sends at most:

    * ``get``, ``get_versioned``, ``put``, ``delete``: ``A`` requests;
    * ``put_if_absent``, ``put_if_match``: ``A`` conditional Put Blobs, then, if an attempt
      was ambiguous (its response lost), one read-back and its retries: ``2A`` in all;
    * ``list``: ``A`` per page of up to :data:`PAGE_SIZE` names;
    * ``list(prefix, start_after=k)``: the same as ``list(prefix)``: every page from the
      start of ``prefix``, the names up to ``k`` dropped here. ``AzureMailbox`` does not
      declare ``Capability.LIST_START_AFTER``. The SDK (12.31) can send List Blobs a
      ``startFrom`` point, but Azurite, the emulator this backend is tested on, ignores
      it and lists from the start, so no test here could show a store honouring it; a
      capability declared on that basis would be a promise nobody checked.

    Values over 64 MiB are uploaded in blocks, and values over 32 MiB read in 4 MiB chunks:
    several requests per attempt.

Guarantees
    * ``put_if_absent`` is a Put Blob with ``If-None-Match: *``: Azure itself refuses a
      second blob, so exactly one concurrent creator wins, across machines. An existing
      blob is answered with 409 ``BlobAlreadyExists`` (or 412); both mean "lost".
    * Compare-and-swap uses the blob's ETag as the :class:`Version` token
      (``If-Match: <etag>``); a stale ETag is answered with 412 ``ConditionNotMet``.
    * Every write carries a fresh write id in the blob metadata
      (``gradientmail_write_id``), so an ambiguous conditional write is decided by reading
      it back (see :class:`~gradientmail.backends.BaseMailbox`).
    * Nothing listening at the endpoint fails within about a second.
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any
from urllib.parse import urlsplit

from gradientmail import _errors as errors
from gradientmail.backends._base import Conflict, Stat
from gradientmail.backends._object_store import PAGE_SIZE, ObjectStoreMailbox, StoreURL
from gradientmail.backends._options import redact, require
from gradientmail.mailbox import Version

__all__ = ["CONNECTION_STRING_ENV", "PAGE_SIZE", "WRITE_ID_METADATA", "AzureMailbox"]

#: The blob metadata field holding the write id (Azure metadata names are C# identifiers).
WRITE_ID_METADATA = "gradientmail_write_id"
#: The environment variable read when neither ``connection_string`` nor ``account_url`` is given.
CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"


# -- URL and options ---------------------------------------------------------------------------

# 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or
# digit.
_CONTAINER_NAME = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_CONTAINER_RULE = "3-63 lowercase letters, digits and single hyphens"


def _damaged(what: str) -> ValueError:
    # Never echo the value: it holds an account key or a SAS token.
    return ValueError(
        f"the {what} holds a space, which a real one never does: a '+' in it was read as a "
        "space, as happens in a URL's query; pass secrets as keyword arguments "
        f"(connection_string=..., account_url=...) or set {CONNECTION_STRING_ENV}, never "
        "in the URL"
    )


def _connection_string(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    for field in value.split(";"):
        name, _, secret = field.partition("=")
        if name.strip() in ("AccountKey", "SharedAccessSignature") and " " in secret.strip():
            raise _damaged(f"{name.strip()} in the connection string")
    return value


def _account_url(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    if " " in urlsplit(value).query:
        raise _damaged("SAS token in account_url")
    return value


_OPTIONS = {
    "connection_string": _connection_string,
    "account_url": _account_url,
}


# -- errors ------------------------------------------------------------------------------------


def _error_code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


# -- the mailbox -------------------------------------------------------------------------------


class AzureMailbox(ObjectStoreMailbox):
    """A mailbox in an Azure Blob container; see the module docstring for options."""

    layout = StoreURL("az", "Azure", "container", _CONTAINER_NAME, _CONTAINER_RULE)
    accepted_options = _OPTIONS
    write_id_metadata = WRITE_ID_METADATA

    # -- the client ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        """The SDK's container client on a new service client (no request is sent)."""
        sdk = require("azure.storage.blob", "azure")
        import requests
        from urllib3.util.retry import Retry

        connection_string: str | None = self._settings.get("connection_string")
        account_url: str | None = self._settings.get("account_url")
        if connection_string is not None and account_url is not None:
            raise errors.ConfigurationError(
                f"give either connection_string or account_url for {self.url}, not both"
            )
        # Our own session: the SDK's default keeps 10 connections per host, and racing
        # threads each hold one. Retries stay off at every layer (see the module docstring).
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=4,
            pool_maxsize=self.pool_connections,
            max_retries=Retry(total=False, redirect=False, raise_on_status=False),
        )
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        settings: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": self._timeouts[0],
            "read_timeout": self._timeouts[1],
            "session": session,
        }
        source = "the connection_string option"
        if connection_string is None and account_url is None:
            source = f"${CONNECTION_STRING_ENV}"
            connection_string = os.environ.get(CONNECTION_STRING_ENV, "").strip() or None
            if connection_string is None:
                raise errors.ConfigurationError(
                    f"no Azure storage account configured for {self.url}: set "
                    f"{CONNECTION_STRING_ENV}, or pass the connection_string or account_url "
                    "option (e.g. account_url=https://ACCOUNT.blob.core.windows.net)"
                )
        self._anonymous = False  # account_url with neither a SAS nor azure-identity
        if connection_string is not None:
            try:
                client = sdk.BlobServiceClient.from_connection_string(connection_string, **settings)
            except ValueError:
                # The SDK's message does not echo the string; ours must not either.
                raise errors.ConfigurationError(
                    f"the Azure connection string in {source} is malformed (for {self.url}); "
                    "expected 'DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;"
                    "EndpointSuffix=core.windows.net' or one with a BlobEndpoint=..."
                ) from None
        else:
            assert account_url is not None
            credential = None
            has_sas = "sig=" in urlsplit(account_url).query
            if not has_sas and importlib.util.find_spec("azure.identity") is not None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            self._anonymous = not has_sas and credential is None
            try:
                client = sdk.BlobServiceClient(account_url, credential=credential, **settings)
            except ValueError:
                raise errors.ConfigurationError(
                    f"the account_url option for {self.url} is not a valid URL; expected "
                    "https://ACCOUNT.blob.core.windows.net"
                ) from None
        self._endpoint = redact(client.url)
        return client.get_container_client(self.container)

    def _disconnect(self, client: Any) -> None:
        client.close()

    # -- errors -------------------------------------------------------------------------------

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        from azure.core.exceptions import AzureError

        return (AzureError,)

    def _map_error(self, exc: BaseException, key: str | None) -> errors.GradientMailError:
        """The one place SDK exceptions become gradientmail errors.

        Messages carry the status and Azure's error code, never the SDK's own text, which
        may quote request details.
        """
        from azure.core import exceptions as az

        code = _error_code(exc)
        status = getattr(exc, "status_code", None)
        if code == "ContainerNotFound":
            message = (
                f"container {self.container!r} does not exist at {self._endpoint}; create it "
                f"(az storage container create --name {self.container}) or fix the URL"
            )
            return self._failure(errors.BucketNotFoundError, key, message)
        if type(exc).__name__ == "CredentialUnavailableError":  # azure-identity found none
            message = (
                f"no Azure credential found for {self._endpoint}: DefaultAzureCredential "
                "tried the environment, managed identity and the Azure CLI; run `az login`, "
                "set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, or use a "
                f"connection string ({CONNECTION_STRING_ENV})"
            )
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, az.ClientAuthenticationError) or status in (401, 403):
            detail = f"HTTP {status} {code}".strip() if status else type(exc).__name__
            if self._anonymous:
                message = (
                    f"Azure refused an anonymous request to {self._endpoint} ({detail}): "
                    "account_url has no SAS token and azure-identity is not installed; "
                    "pip install azure-identity (for DefaultAzureCredential), add a SAS "
                    "token to account_url, or use a connection string"
                )
            else:
                message = (
                    f"Azure refused the credentials for {self._endpoint} ({detail}); check "
                    "the account key or SAS in the connection string / account_url, or the "
                    "role assignment (Storage Blob Data Contributor) on container "
                    f"{self.container!r}"
                )
            return self._failure(errors.AccessDeniedError, key, message)
        if isinstance(exc, az.ServiceRequestError):
            # The request was never sent (connection refused, DNS, connect timeout).
            fix = "check the account URL and the network, or that the emulator (Azurite) runs"
            return self._unreachable(key, fix)
        if isinstance(exc, az.ServiceResponseError):
            return self._interrupted(exc, key)
        if status is not None and (status >= 500 or status in (408, 429)):
            return self._transient(status, f"HTTP {status} {code}", key)
        if status is not None:
            return self._failure(errors.BackendError, key, f"Azure answered HTTP {status} {code}")
        return self._failure(
            errors.BackendError, key, f"the Azure client failed ({type(exc).__name__})"
        )

    # -- operations ---------------------------------------------------------------------------

    def _blob(self, key: str) -> Any:
        return self._client().get_blob_client(self._name(key))

    def _conditional_upload(
        self, key: str, data: bytes, write_id: str, condition: dict[str, Any]
    ) -> Version | Conflict:
        from azure.core.exceptions import HttpResponseError

        with self._mapped(key):
            try:
                result = self._blob(key).upload_blob(
                    data, metadata=self._stamp(write_id), **condition
                )
            except HttpResponseError as exc:
                # 409 BlobAlreadyExists (create), 412 ConditionNotMet (create or CAS), and
                # If-Match on a missing blob: 404 BlobNotFound on Azure (Azurite answers
                # 412). The SDK does not retry (retry_total=0): this answers our only request.
                code = _error_code(exc)
                if code in ("BlobAlreadyExists", "ConditionNotMet") or (
                    code == "BlobNotFound" and "etag" in condition
                ):
                    return Conflict.LOST
                raise
        return Version(str(result["etag"]))

    def _create(self, key: str, data: bytes, write_id: str) -> Version | Conflict:
        # overwrite=False sends If-None-Match: *.
        return self._conditional_upload(key, data, write_id, {"overwrite": False})

    def _replace(
        self, key: str, data: bytes, version: Version, write_id: str
    ) -> Version | Conflict:
        from azure.core import MatchConditions

        condition = {
            "overwrite": True,
            "etag": version.token,
            "match_condition": MatchConditions.IfNotModified,
        }
        return self._conditional_upload(key, data, write_id, condition)

    def _write(self, key: str, data: bytes, write_id: str) -> None:
        with self._mapped(key):
            self._blob(key).upload_blob(data, overwrite=True, metadata=self._stamp(write_id))

    def _read(self, key: str) -> tuple[bytes, Version]:
        from azure.core.exceptions import HttpResponseError

        with self._mapped(key):
            try:
                download = self._blob(key).download_blob(max_concurrency=1)
                data = download.readall()
            except HttpResponseError as exc:
                if _error_code(exc) != "BlobNotFound":
                    raise
                raise errors.KeyNotFoundError(key, self.url) from None
        return bytes(data), Version(str(download.properties.etag))

    def _stat(self, key: str) -> Stat | None:
        from azure.core.exceptions import HttpResponseError

        with self._mapped(key):
            try:
                properties = self._blob(key).get_blob_properties()
            except HttpResponseError as exc:
                if _error_code(exc) != "BlobNotFound":
                    raise
                return None
        return self._stat_of(properties.etag, properties.metadata)

    def _delete(self, key: str) -> None:
        from azure.core.exceptions import HttpResponseError

        with self._mapped(key):
            try:
                self._blob(key).delete_blob()
            except HttpResponseError as exc:
                if _error_code(exc) != "BlobNotFound":
                    raise

    def _list_page(
        self, names: str, token: str | None, *, start_after: str | None = None
    ) -> tuple[list[str], str | None]:
        # start_after is never given: Azure does not declare LIST_START_AFTER (see the
        # module docstring), so a partial listing filters this full one.
        pages = (
            self._client()
            .list_blob_names(name_starts_with=names, results_per_page=self.page_size)
            .by_page(continuation_token=token)
        )
        for page in pages:
            return list(page), pages.continuation_token
        return [], None
