"""gs:// against fake-gcs-server: its own faults, configuration and error mapping.

The contract itself (every operation, keys, listing, CAS) runs on GCS through the ``box``
fixture in test_contract.py; this file covers what is specific to the GCS backend.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterator

import pytest

from gradientmail import InvalidKeyError, Mailbox, from_url
from gradientmail._errors import (
    AccessDeniedError,
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    KeyNotFoundError,
)
from gradientmail.backends._base import BaseMailbox
from gradientmail.mailbox import Capability
from tests.backends.test_cloud_faults import PROFILES
from tests.support.connections import counting_connections
from tests.support.emulators import free_port
from tests.support.faultproxy import FaultProxy, match
from tests.support.rigs import Rig

pytestmark = pytest.mark.emulator


# -- faults injected by the proxy that only this backend has (shared ones: test_cloud_faults.py)

CREATE = PROFILES["gcs"].create

UPLOAD = match(method="POST", path=r"/upload/storage/v1/")


@pytest.fixture
def proxy(gcs_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(gcs_endpoint) as running:
        yield running


@pytest.fixture
def proxied(rig_gcs: Rig, proxy: FaultProxy) -> Mailbox:
    """A fresh mailbox whose every request passes through ``proxy``."""
    return from_url(rig_gcs.url(), emulator_host=proxy.url)


def test_429_is_transient_and_retried(proxied: Mailbox, proxy: FaultProxy, rig_gcs: Rig) -> None:
    proxy.respond(429, UPLOAD)  # the first upload only
    proxied.put("k", b"v")
    assert proxy.count(UPLOAD) == 2
    # The retry stored the value, once: read through the emulator directly, not the proxy.
    direct = rig_gcs.open(proxied.url)
    assert direct.get("k") == b"v"
    assert list(direct.list()) == ["k"]


@pytest.mark.parametrize(
    ("status", "fix"),
    [(401, "allows anonymous access"), (403, "roles/storage.objectUser")],
)
def test_refused_credentials_are_access_denied(
    proxied: Mailbox, proxy: FaultProxy, status: int, fix: str
) -> None:
    proxy.respond(status, UPLOAD, times=None)
    with pytest.raises(AccessDeniedError) as caught:
        proxied.put_if_absent("k", b"v")
    assert f"HTTP {status}" in str(caught.value)
    assert fix in str(caught.value)
    assert isinstance(caught.value, PermissionError)
    assert proxy.count(UPLOAD) == 1  # permanent: not retried


def test_over_long_object_name_is_refused_before_any_request(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    # The store limits the whole name (URL prefix + key) to 1024; the emulator does not, so
    # the mailbox itself must refuse, naming the rule, without sending anything.
    with pytest.raises(InvalidKeyError, match="prefix takes"):
        proxied.put_if_absent("x" * (proxied.max_key_bytes + 1), b"v")
    assert proxy.count(CREATE) == 0


# -- layout and versions ----------------------------------------------------------------------


def test_keys_live_under_the_url_prefix_and_list_relative_to_it(rig_gcs: Rig) -> None:
    url = rig_gcs.url()
    outer = rig_gcs.open(url)
    inner = rig_gcs.open(url + "/inner")
    assert inner.put_if_absent("a/b", b"1")
    assert outer.get("inner/a/b") == b"1"
    assert list(inner.list()) == ["a/b"]
    assert list(outer.list("inner/")) == ["inner/a/b"]


def test_version_is_the_object_generation_and_carries_the_write_id(rig_gcs: Rig) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from gradientmail.backends.gcs import GCSMailbox

    box = rig_gcs.fresh()
    assert isinstance(box, GCSMailbox)
    box.put_if_absent("k", b"v")
    _, version = box.get_versioned("k")
    client = storage.Client(
        project=None,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": (rig_gcs.options or {})["emulator_host"]},
    )
    bucket = client.bucket(box.bucket)
    blob = bucket.get_blob(box.object_name_prefix + "k")
    assert version.token == str(blob.generation)
    first_id = blob.metadata["gradientmail_write_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first_id), first_id
    # A swap is a new generation with its own write id, and the old version stops matching.
    swapped = box.put_if_match("k", b"w", version)
    assert swapped is not None
    blob = bucket.get_blob(box.object_name_prefix + "k")
    assert swapped.token == str(blob.generation) != version.token
    assert re.fullmatch(r"[0-9a-f]{32}", blob.metadata["gradientmail_write_id"])
    second_id = blob.metadata["gradientmail_write_id"]
    assert box.put_if_match("k", b"x", version) is None
    assert box.get_versioned("k") == (b"w", swapped)
    assert box.put_if_match("k", b"y", swapped) is not None
    third_id = bucket.get_blob(box.object_name_prefix + "k").metadata["gradientmail_write_id"]
    assert len({first_id, second_id, third_id}) == 3, "every write stamps a fresh write id"


def test_capabilities(rig_gcs: Rig) -> None:
    box = rig_gcs.fresh()
    for capability in Capability:
        assert box.supports(capability)


# -- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("gs://", "names no bucket"),
        ("gs:///prefix", "names no bucket"),
        ("gs://Upper_Case", "invalid bucket name"),
        ("gs://ab", "invalid bucket name"),
        ("gs://bucket/a/../b", "'..' segment"),
        ("gcs://bucket//x", "empty"),
    ],
)
def test_malformed_url_is_a_configuration_error(url: str, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint) as caught:
        from_url(url, emulator_host="http://127.0.0.1:9")
    assert "gs://" in str(caught.value)  # shows the accepted form


def test_unknown_option_lists_the_accepted_ones() -> None:
    with pytest.raises(ConfigurationError) as caught:
        from_url("gs://bucket/p", emulator_host="http://127.0.0.1:9", endpoint="x")
    message = str(caught.value)
    assert "'endpoint'" in message
    for accepted in ("project", "emulator_host", "connect_timeout", "read_timeout"):
        assert accepted in message


def test_invalid_timeout_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="read_timeout"):
        from_url("gs://bucket/p", emulator_host="http://127.0.0.1:9", read_timeout="-1")


def test_options_work_as_url_query_parameters(rig_gcs: Rig, gcs_endpoint: str) -> None:
    url = rig_gcs.url()
    box = from_url(f"{url}?emulator_host={gcs_endpoint}&read_timeout=30")
    assert box.put_if_absent("k", b"v")  # emulator_host from the query reached the store
    assert box.url == url  # options never show in the URL
    assert box._timeouts == (3.0, 30.0)  # type: ignore[attr-defined]  # read_timeout applied
    assert rig_gcs.open(url).get("k") == b"v"


def test_gcs_scheme_alias_reaches_the_same_objects(rig_gcs: Rig) -> None:
    url = rig_gcs.url()
    gs = rig_gcs.open(url)
    gcs = rig_gcs.open("gcs://" + url.removeprefix("gs://"))
    assert gs.put_if_absent("k", b"v")
    assert gcs.get("k") == b"v"


def test_storage_emulator_host_is_honoured(
    rig_gcs: Rig, gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = rig_gcs.url()
    rig_gcs.open(url).put("k", b"written-with-the-option")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint.removeprefix("http://"))
    box = from_url(url)  # no emulator_host option: the environment variable decides
    assert box.get("k") == b"written-with-the-option"
    assert box.put_if_absent("k2", b"v")


def test_missing_credentials_raise_access_denied_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", f"{tmp_path}/no-such-key.json")
    with pytest.raises(AccessDeniedError) as caught:
        from_url("gs://some-bucket/run1", project="p")
    message = str(caught.value)
    assert "gs://some-bucket/run1" in message
    assert "gcloud auth application-default login" in message


# -- error mapping ----------------------------------------------------------------------------


def test_nonexistent_bucket_is_reported_by_every_operation(gcs_endpoint: str) -> None:
    box = from_url("gs://no-such-bucket/run1", emulator_host=gcs_endpoint)
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
        assert "'no-such-bucket' does not exist" in message
        assert "gcloud storage buckets create gs://no-such-bucket" in message
        assert "gs://no-such-bucket/run1" in message


def test_missing_key_in_an_existing_bucket_is_key_not_found(rig_gcs: Rig) -> None:
    box = rig_gcs.fresh()
    with pytest.raises(KeyNotFoundError):
        box.get("missing")


@pytest.mark.timeout(60)  # a hang; failing fast is counted in attempts below
def test_nothing_listening_fails_fast_with_endpoint_unreachable() -> None:
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    box = from_url("gs://bucket/run1", emulator_host=endpoint)
    with counting_connections(port) as seen, pytest.raises(EndpointUnreachableError) as caught:
        box.put_if_absent("k", b"v")
    # Fast: one attempt per retry the policy allows (the SDK's own retries are off), and
    # no read-back, as nothing was sent.
    assert seen.attempts == box.retry_policy.attempts
    assert endpoint in str(caught.value)
    assert isinstance(caught.value, ConnectionError)  # `except ConnectionError` works too


# -- identity ---------------------------------------------------------------------------------


def test_repr_and_url_show_no_options(rig_gcs: Rig, gcs_endpoint: str) -> None:
    url = rig_gcs.url()
    box = from_url(url, emulator_host=gcs_endpoint, project="secret-project-name")
    assert repr(box) == f"<GCSMailbox url={url!r}>"
    assert "secret-project-name" not in repr(box)


def test_pickled_mailbox_reopens_with_its_options(rig_gcs: Rig) -> None:
    box = rig_gcs.fresh()
    box.put_if_absent("k", b"v")
    clone = pickle.loads(pickle.dumps(box))
    assert clone.get("k") == b"v"
    assert clone.put_if_absent("k", b"other") is False


def test_closed_mailbox_reconnects_on_next_use(rig_gcs: Rig) -> None:
    box = rig_gcs.fresh()
    assert isinstance(box, BaseMailbox)
    box.put_if_absent("k", b"v")
    box.close()
    assert box.get("k") == b"v"
