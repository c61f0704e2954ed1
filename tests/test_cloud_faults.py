"""Lost responses and transient failures on GCS and Azure, injected by the loopback proxy.

One body per behaviour, run on each backend through a :class:`FaultProfile` that names how
the backend's requests look on the wire and what its store answers. Backend-specific cases
(Azure's 409/412/404 mapping, GCS's 429, credentials) stay in test_gcs.py / test_azure.py;
S3's, which go through boto3's own retries, are in test_s3.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from gradientmail import Mailbox, OutcomeUnknownError, from_url
from tests.emulators.azure import connection_string
from tests.faultproxy import FaultProxy, Predicate, match
from tests.rigs import Rig

pytestmark = pytest.mark.emulator


@dataclass(frozen=True)
class FaultProfile:
    """How one backend's requests and answers look to the proxy."""

    rig: str  # session fixture returning the Rig
    endpoint: str  # session fixture returning the emulator's base URL
    open_through: Callable[[Rig, str], Mailbox]  # a fresh mailbox via the proxy's URL
    create: Predicate  # a conditional create
    swap: Predicate  # a compare-and-swap
    read_back: Predicate  # how the write id is read back
    list_page: Predicate  # one listing request
    created: int  # the store's status for a successful create or swap
    refused: int  # the store's status for a create of an existing key


PROFILES = {
    "gcs": FaultProfile(
        rig="rig_gcs",
        endpoint="gcs_endpoint",
        open_through=lambda rig, url: from_url(rig.url(), emulator_host=url),
        create=match(
            method="POST", path=r"/upload/storage/v1/b/[^/]+/o\?.*ifGenerationMatch=0(&|$)"
        ),
        swap=match(method="POST", path=r"/upload/storage/v1/b/[^/]+/o\?.*ifGenerationMatch=[1-9]"),
        read_back=match(method="GET", path=r"/storage/v1/b/[^/]+/o/"),
        list_page=match(method="GET", path=r"/storage/v1/b/[^/]+/o\?"),
        created=200,
        refused=412,
    ),
    "azure": FaultProfile(
        rig="rig_azure",
        endpoint="azure_endpoint",
        open_through=lambda rig, url: from_url(rig.url(), connection_string=connection_string(url)),
        create=match(method="PUT", headers={"if-none-match": r"^\*$"}),
        swap=match(method="PUT", headers={"if-match": "."}),
        read_back=match(method="HEAD"),
        list_page=match(method="GET", path=r"comp=list"),
        created=201,
        refused=409,
    ),
}


@pytest.fixture(params=sorted(PROFILES))
def profile(request: pytest.FixtureRequest) -> FaultProfile:
    return PROFILES[request.param]


@pytest.fixture
def proxy(request: pytest.FixtureRequest, profile: FaultProfile) -> Iterator[FaultProxy]:
    with FaultProxy(request.getfixturevalue(profile.endpoint)) as running:
        yield running


@pytest.fixture
def proxied(request: pytest.FixtureRequest, profile: FaultProfile, proxy: FaultProxy) -> Mailbox:
    """A fresh mailbox whose every request passes through ``proxy``."""
    return profile.open_through(request.getfixturevalue(profile.rig), proxy.url)


def test_lost_response_to_a_create_that_landed_returns_true(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy
) -> None:
    dropped = proxy.drop_response(profile.create)
    assert proxied.put_if_absent("k", b"mine") is True
    assert dropped.upstream_statuses == [profile.created]  # the store committed it
    assert proxy.count(profile.create) == 2  # the retry met our own object ...
    assert proxy.count(profile.read_back) == 1  # ... and the write id was read back
    assert proxied.get("k") == b"mine"


def test_lost_response_to_a_create_that_lost_returns_false(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy
) -> None:
    assert proxied.put_if_absent("k", b"theirs")
    dropped = proxy.drop_response(profile.create)
    assert proxied.put_if_absent("k", b"mine") is False
    assert dropped.upstream_statuses == [profile.refused]
    assert proxied.get("k") == b"theirs"


def test_refusal_on_the_only_attempt_is_a_loss_without_read_back(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    assert proxied.put_if_absent("k", b"first")
    before = len(proxy.requests)
    assert proxied.put_if_absent("k", b"second") is False
    assert len(proxy.requests) == before + 1  # one create, refused; nothing read back


def test_lost_response_to_a_swap_that_landed_returns_the_new_version(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxied.put("k", b"1")
    _, version = proxied.get_versioned("k")
    dropped = proxy.drop_response(profile.swap)
    new = proxied.put_if_match("k", b"2", version)
    assert dropped.upstream_statuses == [profile.created]
    assert new is not None
    assert proxied.get_versioned("k") == (b"2", new)


def test_ambiguous_create_that_cannot_be_read_back_raises_outcome_unknown(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxy.drop_response(match(), times=None)  # every response is lost, read-backs included
    with pytest.raises(OutcomeUnknownError) as caught:
        proxied.put_if_absent("k", b"mine")
    assert "'k'" in str(caught.value)
    proxy.clear()
    assert proxied.get("k") == b"mine"  # it had landed: False would have been a lie


@pytest.mark.parametrize("status", [500, 503])
def test_transient_server_error_on_create_is_retried(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, status: int
) -> None:
    failed = proxy.fail(profile.create, status=status)
    assert proxied.put_if_absent("k", b"mine") is True
    assert failed.hits == 1
    assert proxy.count(profile.create) == 2
    assert proxied.get("k") == b"mine"


def test_transient_errors_on_reads_and_listing_are_retried(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxied.put("k", b"v")
    proxy.fail(match(method="GET"), status=503, times=2)
    assert proxied.get("k") == b"v"
    proxy.fail(profile.list_page, status=500)
    assert list(proxied.list()) == ["k"]
