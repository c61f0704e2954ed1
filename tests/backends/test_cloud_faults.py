"""Lost responses and transient failures on every cloud backend, injected by the loopback proxy.

One body per behaviour, run on S3 (moto and SeaweedFS), GCS and Azure through a
:class:`FaultProfile` that names how the backend's requests look on the wire and what its
store answers. Every backend turns its SDK's retries off, so each request the proxy sees is
one attempt of the shared retry policy. Backend-specific cases (S3's 409, Azure's
409/412/404 mapping, GCS's 429, credentials) stay in test_s3.py, test_gcs.py and
test_azure.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gradientmail import Mailbox, OutcomeUnknownError, TransientBackendError, from_url
from tests.support.fault_profiles import ATTEMPTS, PROFILES, FaultProfile
from tests.support.faultproxy import FaultProxy, match
from tests.support.rigs import Rig

pytestmark = pytest.mark.emulator


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


@pytest.fixture
def direct(request: pytest.FixtureRequest, profile: FaultProfile, proxied: Mailbox) -> Mailbox:
    """The same mailbox reached directly: another client, and the test's witness."""
    rig: Rig = request.getfixturevalue(profile.rig)
    return from_url(proxied.url, **(rig.options or {}))


def test_lost_response_to_a_create_that_landed_returns_true(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    dropped = proxy.drop_response(profile.create)
    assert proxied.put_if_absent("k", b"mine") is True
    assert dropped.upstream_statuses == [profile.created]  # the store committed it
    assert proxy.count(profile.create) == 2  # the retry met our own object ...
    assert proxy.count(profile.read_back) == 1  # ... and the write id was read back
    assert direct.get("k") == b"mine"


def test_lost_response_to_a_refused_create_is_unknown_not_false(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    # The store refused our create, but its answer was lost: from the client's side this is
    # indistinguishable from a create that landed and was replaced (the next test).
    assert direct.put_if_absent("k", b"theirs")
    dropped = proxy.drop_response(profile.create)
    with pytest.raises(OutcomeUnknownError, match="another writer's object"):
        proxied.put_if_absent("k", b"mine")
    assert dropped.upstream_statuses == [profile.refused]
    assert direct.get("k") == b"theirs"


@pytest.mark.parametrize("interference", ["put", "delete-and-create"])
def test_landed_create_replaced_before_the_retry_is_unknown_never_false(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox, interference: str
) -> None:
    def another_client() -> None:  # runs after the store stored ours, before we hear back
        if interference == "put":
            direct.put("k", b"theirs")
        else:
            direct.delete("k")
            assert direct.put_if_absent("k", b"theirs")

    dropped = proxy.drop_response(profile.create, then=another_client)
    with pytest.raises(OutcomeUnknownError, match="landed and been replaced"):
        proxied.put_if_absent("k", b"mine")
    assert dropped.upstream_statuses == [profile.created]  # ours had landed: False would lie
    assert proxy.count(profile.read_back) == 1
    assert direct.get("k") == b"theirs"


def test_refusal_on_the_only_attempt_is_a_loss_without_read_back(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    assert proxied.put_if_absent("k", b"first")
    before = len(proxy.requests)
    assert proxied.put_if_absent("k", b"second") is False
    assert len(proxy.requests) == before + 1  # one create, refused; nothing read back


def test_refusal_after_throttled_attempts_is_a_loss_without_read_back(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    # A 503 says the store did not carry the request out: those attempts stored nothing,
    # so the refusal that follows is certain.
    assert direct.put_if_absent("k", b"theirs")
    throttled = proxy.fail(profile.create, status=503, times=2)
    assert proxied.put_if_absent("k", b"mine") is False
    assert throttled.hits == 2
    assert proxy.count(profile.create) == 3
    assert proxy.count(profile.read_back) == 0


def test_lost_response_to_a_swap_that_landed_returns_the_new_version(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    proxied.put("k", b"1")
    _, version = proxied.get_versioned("k")
    dropped = proxy.drop_response(profile.swap)
    new = proxied.put_if_match("k", b"2", version)
    assert dropped.upstream_statuses == [profile.created]
    assert new is not None
    assert direct.get_versioned("k") == (b"2", new)


@pytest.mark.parametrize("read_back_fault", ["lost", "500"])
def test_ambiguous_create_that_cannot_be_read_back_raises_outcome_unknown(
    profile: FaultProfile,
    proxied: Mailbox,
    proxy: FaultProxy,
    direct: Mailbox,
    read_back_fault: str,
) -> None:
    proxy.drop_response(profile.create)
    if read_back_fault == "lost":
        proxy.drop_response(profile.read_back, times=None)
    else:
        proxy.fail(profile.read_back, status=500, times=None)
    with pytest.raises(OutcomeUnknownError) as caught:
        proxied.put_if_absent("k", b"mine")
    assert caught.value.key == "k"
    assert direct.get("k") == b"mine"  # it had landed: False would have been a lie


def test_one_call_sends_at_most_twice_the_retry_attempts(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    # Every response lost: each attempt is one request (no SDK retries underneath), then
    # the read-back makes as many attempts again.
    proxy.drop_response(match(), times=None)
    with pytest.raises(OutcomeUnknownError):
        proxied.put_if_absent("k", b"mine")
    assert proxy.count(profile.create) == ATTEMPTS
    assert proxy.count(profile.read_back) == ATTEMPTS
    assert len(proxy.requests) == 2 * ATTEMPTS
    assert direct.get("k") == b"mine"


def test_connections_cut_after_a_delivered_attempt_still_resolve(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    # Attempt 1 lands and its response is lost; later attempts are cut before the store.
    proxy.drop_response(profile.create)
    proxy.drop_request(profile.create, nth=2, times=None)
    assert proxied.put_if_absent("k", b"mine") is True
    assert direct.get("k") == b"mine"


def test_endpoint_gone_after_a_delivered_attempt_is_outcome_unknown_not_unreachable(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    # Attempt 1 lands, its response is lost, and the endpoint then refuses connections. A
    # refused last attempt must not hide that the first one landed: "unreachable" would
    # let a caller conclude the write never happened.
    proxy.drop_response(profile.create, then=proxy.stop_listening)
    with pytest.raises(OutcomeUnknownError):
        proxied.put_if_absent("k", b"mine")
    assert direct.get("k") == b"mine"


@pytest.mark.parametrize("status", [500, 503])
def test_transient_server_error_on_create_is_retried(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox, status: int
) -> None:
    failed = proxy.fail(profile.create, status=status)
    assert proxied.put_if_absent("k", b"mine") is True
    assert failed.hits == 1
    assert proxy.count(profile.create) == 2
    assert direct.get("k") == b"mine"


def test_server_errors_are_retried_by_the_policy_alone_one_request_per_attempt(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy, direct: Mailbox
) -> None:
    proxy.fail(profile.create, status=503, times=ATTEMPTS - 1)
    assert proxied.put_if_absent("k", b"v") is True
    assert proxy.count(profile.create) == ATTEMPTS
    proxy.fail(profile.create, status=503, times=ATTEMPTS)
    with pytest.raises(TransientBackendError) as caught:
        proxied.put_if_absent("j", b"v")
    assert not isinstance(caught.value, OutcomeUnknownError)  # 503: nothing was stored
    assert proxy.count(profile.create) == 2 * ATTEMPTS
    assert list(direct.list()) == ["k"]


def test_transient_errors_on_reads_and_listing_are_retried(
    profile: FaultProfile, proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxied.put("k", b"v")
    proxy.fail(match(method="GET"), status=503, times=2)
    assert proxied.get("k") == b"v"
    proxy.fail(profile.list_page, status=500)
    assert list(proxied.list()) == ["k"]
