"""az:// against Azurite: its own faults, configuration, error mapping and secrets.

The contract itself (every operation, keys, listing, CAS) runs on Azure through the ``box``
fixture in test_contract.py; this file covers what is specific to the Azure backend.
"""

from __future__ import annotations

import logging
import pickle
import traceback
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from gradientmail import InvalidKeyError, Mailbox, from_url
from gradientmail._errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    GradientMailError,
    KeyNotFoundError,
)
from gradientmail.backends._base import BaseMailbox
from gradientmail.mailbox import Capability
from tests.backends.test_cloud_faults import PROFILES
from tests.support.connections import counting_connections
from tests.support.emulators import free_port
from tests.support.emulators.azure import AZURITE_KEY, CONTAINER, connection_string
from tests.support.faultproxy import FaultProxy, Predicate
from tests.support.rigs import Rig

pytestmark = pytest.mark.emulator

#: A well-formed account key that Azurite does not accept; it must never leak anywhere.
WRONG_KEY = "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3Jvbmc9PQ=="


def _everything_said(error: BaseException) -> str:
    """The error's message, repr and whole traceback, chained causes included."""
    formatted = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return f"{error}\n{error!r}\n{formatted}"


# -- faults injected by the proxy that only this backend has (shared ones: test_cloud_faults.py)

CREATE = PROFILES["azure"].create
SWAP = PROFILES["azure"].swap
READ_BACK = PROFILES["azure"].read_back


def _answer_azure_error(proxy: FaultProxy, when: Predicate, status: int, code: str) -> None:
    """Make ``proxy`` answer the next request matching ``when`` with Azure error ``code``."""
    body = (
        f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
        "<Message>injected by the test proxy</Message></Error>"
    ).encode()
    headers = {"x-ms-error-code": code, "Content-Type": "application/xml"}
    proxy.respond(status, when, body=body, headers=headers)


@pytest.fixture
def proxy(azure_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(azure_endpoint) as running:
        yield running


@pytest.fixture
def proxied(rig_azure: Rig, proxy: FaultProxy) -> Mailbox:
    """A fresh mailbox whose every request passes through ``proxy``."""
    return from_url(rig_azure.url(), connection_string=connection_string(proxy.url))


def test_412_condition_not_met_on_create_is_a_loss_too(proxied: Mailbox, proxy: FaultProxy) -> None:
    _answer_azure_error(proxy, CREATE, 412, "ConditionNotMet")
    assert proxied.put_if_absent("k", b"mine") is False
    assert proxy.count(READ_BACK) == 0


def test_if_match_on_a_missing_blob_answered_404_is_a_stale_version(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxied.put("k", b"1")
    _, version = proxied.get_versioned("k")
    _answer_azure_error(proxy, SWAP, 404, "BlobNotFound")
    assert proxied.put_if_match("k", b"2", version) is None
    assert proxied.get("k") == b"1"


def test_over_long_object_name_is_refused_before_any_request(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    # The store limits the whole name (URL prefix + key) to 1024; the emulator does not, so
    # the mailbox itself must refuse, naming the rule, without sending anything.
    with pytest.raises(InvalidKeyError, match="prefix takes"):
        proxied.put_if_absent("x" * (proxied.max_key_bytes + 1), b"v")
    assert proxy.count(CREATE) == 0


# -- layout and versions ----------------------------------------------------------------------


def test_keys_live_under_the_url_prefix_and_list_relative_to_it(rig_azure: Rig) -> None:
    url = rig_azure.url()
    outer = rig_azure.open(url)
    inner = rig_azure.open(url + "/inner")
    assert inner.put_if_absent("a/b", b"1")
    assert outer.get("inner/a/b") == b"1"
    assert list(inner.list()) == ["a/b"]
    assert list(outer.list("inner/")) == ["inner/a/b"]


def test_version_is_the_etag_and_the_blob_carries_the_write_id(
    rig_azure: Rig, azure_endpoint: str
) -> None:
    from azure.storage.blob import BlobServiceClient

    from gradientmail.backends.azure import AzureMailbox

    box = rig_azure.fresh()
    assert isinstance(box, AzureMailbox)
    box.put_if_absent("k", b"v")
    _, version = box.get_versioned("k")
    service = BlobServiceClient.from_connection_string(connection_string(azure_endpoint))
    name = box.object_name_prefix + "k"
    properties = service.get_blob_client(CONTAINER, name).get_blob_properties()
    assert version.token == properties.etag
    assert len(properties.metadata["gradientmail_write_id"]) == 32


def test_capabilities(rig_azure: Rig) -> None:
    """Everything but a native partial listing: Azurite ignores List Blobs' startFrom."""
    box = rig_azure.fresh()
    for capability in Capability:
        assert box.supports(capability) is (capability is not Capability.LIST_START_AFTER)


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("az://", "names no container"),
        ("az:///prefix", "names no container"),
        ("az://Upper", "invalid container name"),
        ("az://under_score", "invalid container name"),
        ("az://ab", "invalid container name"),
        ("az://double--hyphen", "invalid container name"),
        ("az://container/a/../b", "'..' segment"),
        ("az://container//x", "empty"),
    ],
)
def test_malformed_url_is_a_configuration_error(url: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint) as caught:
        from_url(url, connection_string=connection_string("http://127.0.0.1:9"))
    assert "az://" in str(caught.value)  # shows the accepted form
    assert AZURITE_KEY not in str(caught.value)


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(ConfigurationError) as caught:
        from_url("az://container/p", account_key=AZURITE_KEY)
    message = str(caught.value)
    assert "'account_key'" in message
    for accepted in ("connection_string", "account_url", "connect_timeout", "read_timeout"):
        assert accepted in message
    assert AZURITE_KEY not in message


def test_connection_string_and_account_url_together_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="not both") as caught:
        from_url(
            "az://container/p",
            connection_string=connection_string("http://127.0.0.1:9"),
            account_url="http://127.0.0.1:9/devstoreaccount1",
        )
    assert AZURITE_KEY not in _everything_said(caught.value)


def test_no_account_configured_names_the_ways_to_configure_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        from_url("az://container/p")
    message = str(caught.value)
    for way in ("AZURE_STORAGE_CONNECTION_STRING", "connection_string", "account_url"):
        assert way in message


def test_malformed_connection_string_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    malformed = f"AccountKey={WRONG_KEY};this is not a connection string"
    with pytest.raises(ConfigurationError, match="malformed") as caught:
        from_url("az://container/p", connection_string=malformed)
    assert WRONG_KEY not in _everything_said(caught.value)
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", malformed)
    with pytest.raises(ConfigurationError, match="AZURE_STORAGE_CONNECTION_STRING") as caught:
        from_url("az://container/p")
    assert WRONG_KEY not in _everything_said(caught.value)


#: A well-formed account key with a '+', which a URL query decodes as a space.
KEY_WITH_PLUS = "QWNjb3VudEtleStXaXRoK1BsdXNlcysrK0FjY291bnRLZXkrV2l0aCtQbHVzZXMrKys+Lw=="


def test_account_key_in_the_url_query_arrives_damaged_and_is_refused_unechoed() -> None:
    secret = connection_string("http://127.0.0.1:9").replace(AZURITE_KEY, KEY_WITH_PLUS)
    assert "+" in secret
    with pytest.raises(ConfigurationError) as caught:
        from_url(f"az://container/p?connection_string={secret}")
    said = _everything_said(caught.value)
    assert "AZURE_STORAGE_CONNECTION_STRING" in said
    assert "keyword argument" in said
    for fragment in KEY_WITH_PLUS.split("+"):
        assert fragment not in said
    # The same string as a keyword argument arrives intact and is accepted.
    from_url("az://container/p", connection_string=secret)


def test_sas_token_damaged_by_url_query_decoding_is_refused_unechoed() -> None:
    damaged = "http://127.0.0.1:9/devstoreaccount1?sv=2024-08-04&sig=abc def%3D"
    with pytest.raises(ConfigurationError, match="AZURE_STORAGE_CONNECTION_STRING") as caught:
        from_url("az://container/p", account_url=damaged)
    assert "abc def" not in _everything_said(caught.value)


def test_azure_storage_connection_string_is_honoured(
    rig_azure: Rig, azure_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = rig_azure.url()
    rig_azure.open(url).put("k", b"written-with-the-option")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection_string(azure_endpoint))
    box = from_url(url)  # no option: the environment variable decides
    assert box.get("k") == b"written-with-the-option"
    assert box.put_if_absent("k2", b"v")


def _account_sas() -> str:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    return str(
        generate_account_sas(
            account_name="devstoreaccount1",
            account_key=AZURITE_KEY,
            resource_types=ResourceTypes(service=True, container=True, object=True),
            permission=AccountSasPermissions(
                read=True, write=True, delete=True, list=True, add=True, create=True
            ),
            expiry=datetime.now(timezone.utc) + timedelta(hours=1),
        )
    )


def test_account_url_with_a_sas_token_is_honoured_and_never_shown(
    rig_azure: Rig, azure_endpoint: str
) -> None:
    sas = _account_sas()
    signature = dict(part.split("=", 1) for part in sas.split("&"))["sig"]
    account_url = f"{azure_endpoint}/devstoreaccount1?{sas}"
    url = rig_azure.url()
    box = from_url(url, account_url=account_url)
    assert box.put_if_absent("k", b"v")
    assert rig_azure.open(url).get("k") == b"v"
    assert signature not in repr(box)
    missing = from_url("az://no-such-container/p", account_url=account_url)
    with pytest.raises(BucketNotFoundError) as caught:
        missing.get("k")
    message = str(caught.value)
    assert f"{azure_endpoint}/devstoreaccount1" in message  # the endpoint, without its query
    assert signature not in message
    assert "sig=" not in message


def test_account_url_without_any_credential_says_how_to_add_one(
    rig_azure: Rig, azure_endpoint: str
) -> None:
    import importlib.util

    if importlib.util.find_spec("azure.identity") is not None:
        pytest.skip("azure-identity is installed, so DefaultAzureCredential is used")
    box = from_url(rig_azure.url(), account_url=f"{azure_endpoint}/devstoreaccount1")
    with pytest.raises(AccessDeniedError) as caught:
        box.put_if_absent("k", b"v")
    message = str(caught.value)
    assert "anonymous" in message
    assert "pip install azure-identity" in message


# -- error mapping ----------------------------------------------------------------------------


def test_nonexistent_container_is_reported_by_every_operation(azure_endpoint: str) -> None:
    box = from_url(
        "az://no-such-container/run1", connection_string=connection_string(azure_endpoint)
    )
    operations = [
        lambda: box.put_if_absent("k", b"v"),
        lambda: box.get("k"),
        lambda: list(box.list()),
        lambda: box.delete("k"),
        lambda: box.put("k", b"v"),
    ]
    for operation in operations:
        with pytest.raises(BucketNotFoundError) as caught:
            operation()
        message = str(caught.value)
        assert "'no-such-container' does not exist" in message
        assert "az storage container create --name no-such-container" in message
        assert "az://no-such-container/run1" in message
        assert AZURITE_KEY not in _everything_said(caught.value)


def test_missing_key_in_an_existing_container_is_key_not_found(rig_azure: Rig) -> None:
    with pytest.raises(KeyNotFoundError):
        rig_azure.fresh().get("missing")


@pytest.mark.timeout(60)  # a hang; failing fast is counted in attempts below
def test_nothing_listening_fails_fast_with_endpoint_unreachable() -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    box = from_url("az://container/run1", connection_string=connection_string(endpoint))
    with counting_connections(port) as seen, pytest.raises(EndpointUnreachableError) as caught:
        box.put_if_absent("k", b"v")
    # Fast: one attempt per retry the policy allows (the SDK's own retries are off), and
    # no read-back, as nothing was sent.
    assert seen.attempts == box.retry_policy.attempts
    assert endpoint in str(caught.value)
    assert isinstance(caught.value, ConnectionError)  # `except ConnectionError` works too
    assert AZURITE_KEY not in _everything_said(caught.value)


def test_wrong_account_key_is_access_denied_and_never_leaks(
    rig_azure: Rig, azure_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = connection_string(azure_endpoint).replace(AZURITE_KEY, WRONG_KEY)
    caplog.set_level(logging.DEBUG)
    box = from_url(rig_azure.url(), connection_string=wrong)
    errors: list[GradientMailError] = []
    for operation in (lambda: box.put_if_absent("k", b"v"), lambda: box.get("k")):
        with pytest.raises(AccessDeniedError) as caught:
            operation()
        errors.append(caught.value)
    assert "check the account key" in str(errors[0])
    for error in errors:
        assert WRONG_KEY not in _everything_said(error)
    assert WRONG_KEY not in repr(box)
    assert WRONG_KEY not in caplog.text
    assert caplog.records  # the SDK did log: the check above looked at real output


# -- identity ---------------------------------------------------------------------------------


def test_repr_and_url_never_show_the_connection_string(rig_azure: Rig) -> None:
    url = rig_azure.url()
    box = rig_azure.open(url)
    assert repr(box) == f"<AzureMailbox url={url!r}>"
    assert box.url == url


def test_pickled_mailbox_reopens_with_its_options(rig_azure: Rig) -> None:
    box = rig_azure.fresh()
    box.put_if_absent("k", b"v")
    clone = pickle.loads(pickle.dumps(box))
    assert clone.get("k") == b"v"
    assert clone.put_if_absent("k", b"other") is False


def test_pickle_carries_the_account_key_and_sas_as_documented(
    rig_azure: Rig, azure_endpoint: str
) -> None:
    # Documented next to every pickling mention: worker processes need the secret to reopen
    # the mailbox, so whoever can read the pickle can use it.
    box = rig_azure.fresh()
    assert AZURITE_KEY.encode() in pickle.dumps(box)
    sas = _account_sas()
    signature = dict(part.split("=", 1) for part in sas.split("&"))["sig"]
    with_sas = from_url(box.url, account_url=f"{azure_endpoint}/devstoreaccount1?{sas}")
    assert signature.encode() in pickle.dumps(with_sas)
    assert signature not in repr(with_sas)


def test_closed_mailbox_reconnects_on_next_use(rig_azure: Rig) -> None:
    box = rig_azure.fresh()
    assert isinstance(box, BaseMailbox)
    box.put_if_absent("k", b"v")
    box.close()
    assert box.get("k") == b"v"
