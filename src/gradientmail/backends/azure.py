"""``az://container/prefix``: a mailbox in Azure Blob Storage.

URL and options
    ``az://CONTAINER`` or ``az://CONTAINER/PREFIX``. Keys are stored as block blobs named
    ``PREFIX/KEY``; the container must already exist. The storage account comes from,
    in this order:

    * ``connection_string`` (str): an account connection string;
    * ``account_url`` (str): e.g. ``https://ACCOUNT.blob.core.windows.net``. A SAS token in
      its query is used as is; otherwise credentials come from ``azure-identity``'s
      ``DefaultAzureCredential`` when that package is installed (it is not a dependency);
    * the ``AZURE_STORAGE_CONNECTION_STRING`` environment variable.

    ``connect_timeout`` (float seconds, default 3) and ``read_timeout`` (float seconds,
    default 60) bound every request.

    Connection strings, account keys and SAS tokens never appear in a ``repr``, an error
    message or a log line written by gradientmail: messages name the mailbox URL and at
    most the account endpoint without its query. A mailbox opened with
    ``connection_string`` carries it when pickled, so worker processes can reopen it.

Errors
    :meth:`AzureMailbox._map_error` is the one place SDK exceptions become gradientmail
    errors: a missing container raises ``BucketNotFoundError``, refused or missing
    credentials ``AccessDeniedError``, nothing listening at the endpoint
    ``EndpointUnreachableError``, 5xx / 429 / 408 / timeouts / dropped connections
    ``TransientBackendError``.

Guarantees
    * ``put_if_absent`` is a Put Blob with ``If-None-Match: *``: Azure itself refuses a
      second blob, so exactly one concurrent creator wins, across machines. An existing
      blob is answered with 409 ``BlobAlreadyExists`` (or 412); both mean "lost".
    * Compare-and-swap uses the blob's ETag as the :class:`Version` token
      (``If-Match: <etag>``); a stale ETag is answered with 412 ``ConditionNotMet``.
    * Every write carries a fresh write id in the blob metadata
      (``gradientmail_write_id``), so an ambiguous conditional write is decided by reading
      it back (see :class:`~gradientmail.mailbox.BaseMailbox`).
    * The SDK's own retries are switched off (``retry_total=0``): the shared
      :class:`~gradientmail.mailbox.RetryPolicy` sees every attempt, so a conflict answering
      the only request sent is a certain loss, and one after a retried attempt is read back.
      Nothing listening at the endpoint fails within about a second.
    * ``list`` fetches one page of up to :data:`PAGE_SIZE` names per request, lazily.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar
from urllib.parse import urlsplit

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

__all__ = ["CONNECTION_STRING_ENV", "PAGE_SIZE", "WRITE_ID_METADATA", "AzureMailbox"]

#: Blob names fetched per listing request.
PAGE_SIZE = 1000
#: The blob metadata field holding the write id of the write that stored the blob.
WRITE_ID_METADATA = "gradientmail_write_id"
#: The environment variable read when neither ``connection_string`` nor ``account_url`` is given.
CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"

# Container names: 3-63 lowercase letters, digits and single hyphens, starting and ending
# with a letter or digit.
_CONTAINER_NAME = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_POOL_SIZE = 64  # connections kept per host: racing threads each hold one
_EXAMPLE = "e.g. az://my-container/run1"


def _positive_float(value: Any) -> float:
    number = float(value)
    if not number > 0:
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return number


def _secret(value: object) -> str:
    # Never echo the value: it holds an account key or a SAS token.
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "connection_string": _secret,
    "account_url": _secret,
    "connect_timeout": _positive_float,
    "read_timeout": _positive_float,
}
_DEFAULTS = {"connect_timeout": 3.0, "read_timeout": 60.0}


def _public_endpoint(url: str) -> str:
    """``url`` without user info, query or fragment (where SAS tokens live)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def _error_code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


class AzureMailbox(BaseMailbox):
    """A mailbox in an Azure Blob container; see the module docstring for options."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP, Capability.SHARED_ACROSS_PROCESSES}
    )

    def __init__(self, url: str, container: str, prefix: str, options: dict[str, Any]) -> None:
        super().__init__(url, options)
        settings = parse_options("az", options, _OPTIONS, _DEFAULTS)
        if "connection_string" in settings and "account_url" in settings:
            raise ConfigurationError(
                f"give either connection_string or account_url for {url}, not both"
            )
        self.container = container
        self.prefix = prefix  # "" or ending in "/"
        self.object_name_prefix = prefix
        self._connection_string: str | None = settings.get("connection_string")
        self._account_url: str | None = settings.get("account_url")
        self._timeouts = (settings["connect_timeout"], settings["read_timeout"])
        self._lock = threading.Lock()
        self._handle: Any = None  # the SDK ContainerClient, created on first use
        self._endpoint = "the Azure Blob endpoint"  # public part of the account URL, once known
        self._anonymous = False  # account_url with neither a SAS nor azure-identity
        self._sdk = require("azure.storage.blob", "azure")
        self._connect()  # surfaces configuration errors at open time

    @classmethod
    def open(cls, url: str, **options: Any) -> AzureMailbox:
        """Open ``az://container/prefix``.

        Raises:
            ConfigurationError: a malformed URL, an unknown or invalid option, a malformed
                connection string, or no account configured at all.
            MissingDependencyError: azure-storage-blob is not installed.
        """
        parse_options("az", options, _OPTIONS)
        container, prefix = split_store_url(
            url,
            store="Azure",
            container="container",
            name=_CONTAINER_NAME,
            name_rule="3-63 lowercase letters, digits and single hyphens",
            example=_EXAMPLE,
        )
        return cls(url, container, prefix + "/" if prefix else "", options)

    # -- the client -------------------------------------------------------------------------

    def _connect(self) -> Any:
        """The SDK container client, created on first use (thread-safe)."""
        handle = self._handle
        if handle is not None:
            return handle
        with self._lock:
            if self._handle is None:
                self._handle = self._make_client().get_container_client(self.container)
            return self._handle

    def _make_client(self) -> Any:
        import requests
        from urllib3.util.retry import Retry

        # Our own session: the SDK's default keeps 10 connections per host, and racing
        # threads each hold one. Retries stay off at every layer (see the module docstring).
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(
            pool_connections=4,
            pool_maxsize=_POOL_SIZE,
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
        service = self._sdk.BlobServiceClient
        connection_string = self._connection_string
        source = "the connection_string option"
        if connection_string is None and self._account_url is None:
            connection_string = os.environ.get(CONNECTION_STRING_ENV, "").strip() or None
            source = f"${CONNECTION_STRING_ENV}"
            if connection_string is None:
                raise ConfigurationError(
                    f"no Azure storage account configured for {self.url}: set "
                    f"{CONNECTION_STRING_ENV}, or pass the connection_string or account_url "
                    "option (e.g. account_url=https://ACCOUNT.blob.core.windows.net)"
                )
        if connection_string is not None:
            try:
                client = service.from_connection_string(connection_string, **settings)
            except ValueError:
                # The SDK's message does not echo the string; ours must not either.
                raise ConfigurationError(
                    f"the Azure connection string in {source} is malformed (for {self.url}); "
                    "expected 'DefaultEndpointsProtocol=https;AccountName=...;AccountKey=...;"
                    "EndpointSuffix=core.windows.net' or one with a BlobEndpoint=..."
                ) from None
        else:
            assert self._account_url is not None
            account_url = self._account_url
            credential = None
            has_sas = "sig=" in urlsplit(account_url).query
            if not has_sas and importlib.util.find_spec("azure.identity") is not None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            self._anonymous = not has_sas and credential is None
            try:
                client = service(account_url, credential=credential, **settings)
            except ValueError:
                raise ConfigurationError(
                    f"the account_url option for {self.url} is not a valid URL; expected "
                    "https://ACCOUNT.blob.core.windows.net"
                ) from None
        self._endpoint = _public_endpoint(client.url)
        return client

    def close(self) -> None:
        """Close the client's connections; the next operation opens a new client."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    # -- errors -----------------------------------------------------------------------------

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions the SDK raises, which ``_map_error`` translates."""
        from azure.core.exceptions import AzureError

        return (AzureError,)

    def _map_error(self, exc: BaseException, key: str | None) -> BackendError:
        """Turn an SDK exception into a gradientmail error (the only place).

        Messages carry the status and Azure's error code, never the SDK's own text, which
        may quote request details.
        """
        from azure.core import exceptions as az

        where = self.url
        code = _error_code(exc)
        status = getattr(exc, "status_code", None)
        if code == "ContainerNotFound":
            return BucketNotFoundError(
                f"container {self.container!r} does not exist at {self._endpoint}; create it "
                f"(az storage container create --name {self.container}) or fix the URL",
                key=key,
                backend=where,
            )
        if type(exc).__name__ == "CredentialUnavailableError":  # azure-identity found none
            return AccessDeniedError(
                f"no Azure credential found for {self._endpoint}: DefaultAzureCredential "
                "tried the environment, managed identity and the Azure CLI; run `az login`, "
                "set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET, or use a "
                f"connection string ({CONNECTION_STRING_ENV})",
                key=key,
                backend=where,
            )
        if isinstance(exc, az.ClientAuthenticationError) or status in (401, 403):
            detail = f"HTTP {status} {code}".strip() if status else type(exc).__name__
            if self._anonymous:
                return AccessDeniedError(
                    f"Azure refused an anonymous request to {self._endpoint} ({detail}): "
                    "account_url has no SAS token and azure-identity is not installed; "
                    "pip install azure-identity (for DefaultAzureCredential), add a SAS "
                    "token to account_url, or use a connection string",
                    key=key,
                    backend=where,
                )
            return AccessDeniedError(
                f"Azure refused the credentials for {self._endpoint} ({detail}); check the "
                f"account key or SAS in the connection string / account_url, or the role "
                f"assignment (Storage Blob Data Contributor) on container {self.container!r}",
                key=key,
                backend=where,
            )
        if isinstance(exc, az.ServiceRequestError):
            # The request was never sent (connection refused, DNS, connect timeout).
            return EndpointUnreachableError(
                f"nothing answered at {self._endpoint}; check the account URL and the "
                "network, or that the emulator (Azurite) is running",
                key=key,
                backend=where,
            )
        if isinstance(exc, az.ServiceResponseError):
            # Sent, but the response was lost or timed out: the request may have landed.
            return TransientBackendError(
                f"the connection to {self._endpoint} failed mid-request "
                f"({type(exc).__name__}); retry later",
                key=key,
                backend=where,
            )
        if status is not None and (status >= 500 or status in (408, 429)):
            return TransientBackendError(
                f"Azure answered HTTP {status} {code} (transient); retry later",
                key=key,
                backend=where,
            )
        if status is not None:
            return BackendError(f"Azure answered HTTP {status} {code}", key=key, backend=where)
        return BackendError(
            f"the Azure client failed ({type(exc).__name__})", key=key, backend=where
        )

    def _blob(self, key: str) -> Any:
        return self._connect().get_blob_client(self.prefix + key)

    def _conditional_upload(
        self, key: str, data: bytes, write_id: str, condition: dict[str, Any]
    ) -> Version | Conflict:
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

        try:
            result = self._blob(key).upload_blob(
                data, metadata={WRITE_ID_METADATA: write_id}, **condition
            )
        except (ResourceExistsError, ResourceModifiedError) as exc:
            # 409 BlobAlreadyExists (create) and 412 ConditionNotMet (create or CAS). The SDK
            # does not retry (retry_total=0), so this answers our only request.
            if _error_code(exc) in ("BlobAlreadyExists", "ConditionNotMet"):
                return Conflict.LOST
            raise self._map_error(exc, key) from exc
        except self._sdk_errors() as exc:
            # If-Match on a missing blob: 404 BlobNotFound on Azure (Azurite answers 412).
            if _error_code(exc) == "BlobNotFound" and "etag" in condition:
                return Conflict.LOST
            raise self._map_error(exc, key) from exc
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
        try:
            self._blob(key).upload_blob(
                data, overwrite=True, metadata={WRITE_ID_METADATA: write_id}
            )
        except self._sdk_errors() as exc:
            raise self._map_error(exc, key) from exc

    def _read(self, key: str) -> tuple[bytes, Version]:
        try:
            download = self._blob(key).download_blob(max_concurrency=1)
            data = download.readall()
        except self._sdk_errors() as exc:
            if _error_code(exc) == "BlobNotFound":
                raise KeyNotFoundError(key, self.url) from None
            raise self._map_error(exc, key) from exc
        return bytes(data), Version(str(download.properties.etag))

    def _stat(self, key: str) -> Stat | None:
        try:
            properties = self._blob(key).get_blob_properties()
        except self._sdk_errors() as exc:
            if _error_code(exc) == "BlobNotFound":
                return None
            raise self._map_error(exc, key) from exc
        write_id = (properties.metadata or {}).get(WRITE_ID_METADATA)
        return Stat(Version(str(properties.etag)), write_id)

    def _delete(self, key: str) -> None:
        try:
            self._blob(key).delete_blob()
        except self._sdk_errors() as exc:
            if _error_code(exc) == "BlobNotFound":
                return
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
        """One page of blob names under ``full`` and the token for the next page."""
        try:
            pages = (
                self._connect()
                .list_blob_names(name_starts_with=full, results_per_page=PAGE_SIZE)
                .by_page(continuation_token=token)
            )
            for page in pages:
                return list(page), pages.continuation_token
            return [], None
        except self._sdk_errors() as exc:
            raise self._map_error(exc, None) from exc
