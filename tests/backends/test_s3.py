"""s3:// against moto_server and SeaweedFS: S3's own faults, stored bytes, versions, races.

The contract itself (every operation, keys, listing, CAS) runs on S3 (moto) through the
``box`` fixture in test_contract.py, and lost responses and retry counts run on S3 (moto and
SeaweedFS) in test_cloud_faults.py; configuration, options and credentials are in
test_s3_config.py. This file covers what is specific to the S3 backend: the bytes other
readers see, what an S3 version names, and races on a store whose conditional writes are
atomic (SeaweedFS).
Faults are injected at the HTTP layer by tests/faultproxy.py, through botocore's real
request path (its own retries are off).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gradientmail import Mailbox, from_url
from gradientmail._errors import (
    AtomicityViolationError,
    InvalidKeyError,
)
from gradientmail.backends.s3 import WRITE_ID_METADATA, S3Mailbox
from gradientmail.conformance._races import RaceReport, cas_counter, race_put_if_absent
from gradientmail.mailbox import Capability
from tests.support.emulators.s3 import BUCKET, moto
from tests.support.faultproxy import FaultProxy, Predicate, match
from tests.support.rigs import Rig

pytestmark = pytest.mark.emulator


def _raw_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint)


def _put(key: str, conditional: str | None = None) -> Predicate:
    """Matches the PutObject of ``key`` (optionally only with the given condition header)."""
    headers = {conditional: "."} if conditional else None
    return match(method="PUT", path=re.escape(f"/{key}") + r"(\?|$)", headers=headers)


def _assert_one_winner_per_key(report: RaceReport) -> None:
    assert report.errors == {}, report.counterexample()
    assert report.multiple_winners() == {}, report.counterexample()
    assert report.no_winner() == [], report.counterexample()
    assert report.wrong_bytes() == {}, report.counterexample()


# -- lost responses and retries, through the proxy -----------------------------------------------


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint) as running:
        yield running


@pytest.fixture
def proxied(rig_s3_moto: Rig, proxy: FaultProxy) -> Mailbox:
    """A fresh S3 mailbox whose every request goes through the fault proxy."""
    return from_url(rig_s3_moto.url(), endpoint_url=proxy.url)


def _key_path(box: Mailbox, key: str) -> str:
    return box.url.removeprefix("s3://") + "/" + key


# Lost responses, read-backs and retry counts shared with GCS and Azure run on S3 (moto and
# SeaweedFS) in test_cloud_faults.py; what follows is S3's own 409.


def test_conditional_request_conflict_409_is_retried_with_backoff(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    path = _key_path(proxied, "k")
    conflict = proxy.s3_conflict(_put(path, "If-None-Match"), times=2)
    assert proxied.put_if_absent("k", b"v") is True
    assert conflict.hits == 2
    assert proxy.count(_put(path)) == 3  # botocore retries nothing; our policy retries
    assert proxied.get("k") == b"v"


def test_conditional_request_conflict_on_a_swap_is_retried(
    proxied: Mailbox, proxy: FaultProxy
) -> None:
    proxied.put("k", b"1")
    _, version = proxied.get_versioned("k")
    proxy.s3_conflict(_put(_key_path(proxied, "k"), "If-Match"))
    new = proxied.put_if_match("k", b"2", version)
    assert new is not None
    assert proxied.get_versioned("k") == (b"2", new)


def test_conflicts_then_a_refusal_is_a_plain_loss_without_read_back(
    rig_s3_moto: Rig, proxied: Mailbox, proxy: FaultProxy
) -> None:
    # Racing creators on real S3 meet 409 ConditionalRequestConflict: the store did not carry
    # the request out, so the 412 that follows is a certain loss, not an unknown outcome.
    assert from_url(proxied.url, **(rig_s3_moto.options or {})).put_if_absent("k", b"theirs")
    path = _key_path(proxied, "k")
    proxy.s3_conflict(_put(path, "If-None-Match"), times=2)
    assert proxied.put_if_absent("k", b"mine") is False
    assert proxy.count(_put(path)) == 3
    assert proxy.count(match(method="HEAD")) == 0


# -- layout, versions, listing -------------------------------------------------------------------


@pytest.fixture(params=["moto", "seaweed"])
def s3_store(request: pytest.FixtureRequest) -> tuple[Rig, Any]:
    """A rig and a raw boto3 client on the same store: moto, then SeaweedFS."""
    rig: Rig = request.getfixturevalue(f"rig_s3_{request.param}")
    return rig, _raw_client(request.getfixturevalue(f"{request.param}_endpoint"))


def _object_name(box: Mailbox, key: str) -> str:
    return box.url.removeprefix(f"s3://{BUCKET}/") + "/" + key


def test_other_readers_see_exactly_the_bytes_written(s3_store: tuple[Rig, Any]) -> None:
    rig, client = s3_store
    box = rig.fresh()
    values = {"created": b'{"lr": 0.1}', "put": b"", "swapped": bytes(range(256))}
    assert box.put_if_absent("created", values["created"])
    box.put("put", values["put"])
    box.put("swapped", b"before")
    _, version = box.get_versioned("swapped")
    assert box.put_if_match("swapped", values["swapped"], version) is not None
    write_ids = set()
    for key, value in values.items():
        raw = client.get_object(Bucket=BUCKET, Key=_object_name(box, key))
        assert raw["Body"].read() == value  # what boto3, the AWS CLI, any reader sees
        assert raw["ContentLength"] == len(value)
        write_ids.add(raw["Metadata"][WRITE_ID_METADATA])  # the read-back's write id
        assert box.get(key) == value
    assert len(write_ids) == 3
    assert all(re.fullmatch(r"[0-9a-f]{32}", write_id) for write_id in write_ids)


def test_objects_written_by_other_tools_can_be_read_and_swapped(
    s3_store: tuple[Rig, Any],
) -> None:
    rig, client = s3_store
    box = rig.fresh()
    client.put_object(Bucket=BUCKET, Key=_object_name(box, "plain"), Body=b"raw")
    assert box.get("plain") == b"raw"
    data, version = box.get_versioned("plain")
    assert data == b"raw"
    swapped = box.put_if_match("plain", b"swapped", version)
    assert swapped is not None
    assert client.get_object(Bucket=BUCKET, Key=_object_name(box, "plain"))["Body"].read() == (
        b"swapped"
    )
    # Another tool rewrites it: our version is stale, and the swap changes nothing.
    client.put_object(Bucket=BUCKET, Key=_object_name(box, "plain"), Body=b"theirs")
    assert box.put_if_match("plain", b"late", swapped) is None
    assert box.get_versioned("plain")[0] == b"theirs"


def test_a_version_names_the_bytes_stored_so_identical_bytes_share_it(
    s3_store: tuple[Rig, Any],
) -> None:
    # What the S3 docstring promises, and what every CAS-written body must allow for.
    box = s3_store[0].fresh()
    assert isinstance(box, S3Mailbox)
    assert box.versions_name_bytes
    box.put("k", b"one")
    _, first = box.get_versioned("k")
    box.put("k", b"two")
    assert box.put_if_match("k", b"stale", first) is None  # never matches other bytes
    assert box.get("k") == b"two"
    box.put("k", b"one")  # the same bytes again: the same ETag
    assert box.get_versioned("k") == (b"one", first)
    assert box.put_if_match("k", b"three", first) is not None  # ABA, as promised
    assert box.get("k") == b"three"


def test_keys_live_under_the_url_prefix_and_list_relative_to_it(rig_s3_moto: Rig) -> None:
    outer = rig_s3_moto.fresh()
    inner = from_url(outer.url + "/sub", **(rig_s3_moto.options or {}))
    inner.put("k", b"1")
    outer.put("sibling", b"2")
    assert list(outer.list()) == ["sibling", "sub/k"]
    assert list(inner.list()) == ["k"]
    assert outer.get("sub/k") == b"1"


def test_prefix_counts_toward_the_1024_byte_object_name_limit(
    rig_s3_moto: Rig, moto_endpoint: str
) -> None:
    box = rig_s3_moto.fresh()
    prefix = box.url.removeprefix(f"s3://{BUCKET}/") + "/"
    assert box.max_key_bytes == 1024 - len(prefix)
    longest = "k" * box.max_key_bytes
    assert box.put_if_absent(longest, b"v") is True
    listed = _raw_client(moto_endpoint).list_objects_v2(Bucket=BUCKET, Prefix=prefix)  # type: ignore[attr-defined]
    assert [len(o["Key"].encode()) for o in listed["Contents"]] == [1024]
    with pytest.raises(InvalidKeyError, match=f"at most {box.max_key_bytes} bytes"):
        box.put_if_absent(longest + "k", b"v")


def test_listing_streams_pages_lazily(rig_s3_moto: Rig, proxy: FaultProxy) -> None:
    box = from_url(rig_s3_moto.url(), endpoint_url=proxy.url)
    for i in range(3):
        box.put(f"k{i}", b"")
    listing = box.list()
    is_list = match(method="GET", path=r"list-type=2")
    assert proxy.count(is_list) == 0  # nothing is fetched before iteration starts
    assert next(listing) == "k0"
    assert proxy.count(is_list) == 1
    assert list(listing) == ["k1", "k2"]


def test_capabilities(rig_s3_moto: Rig) -> None:
    box = rig_s3_moto.fresh()
    assert box.capabilities == {
        Capability.ATOMIC_CREATE,
        Capability.COMPARE_AND_SWAP,
        Capability.SHARED_ACROSS_PROCESSES,
        Capability.LIST_START_AFTER,
    }


# -- races ---------------------------------------------------------------------------------------
# SeaweedFS enforces conditional writes atomically. Losers of a contended key wait on a lock
# that retries about once a second, so these are sized to finish in about a minute together.


def test_threads_race_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = race_put_if_absent(rig_s3_seaweed.fresh(), racers=16, keys=16, mode="threads")
    _assert_one_winner_per_key(report)


def test_processes_race_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = race_put_if_absent(rig_s3_seaweed.fresh(), racers=4, keys=16, mode="processes")
    _assert_one_winner_per_key(report)


def test_cas_counter_with_threads_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    # Every counter value is written once, so S3's byte-named versions cannot bring an
    # old one back: the swaps stay exact.
    report = cas_counter(rig_s3_seaweed.fresh(), workers=6, increments=8, mode="threads")
    assert report.ok, report.counterexample()
    assert report.final == 6 * 8


def test_cas_counter_with_processes_on_seaweedfs(rig_s3_seaweed: Rig) -> None:
    report = cas_counter(rig_s3_seaweed.fresh(), workers=3, increments=5, mode="processes")
    assert report.ok, report.counterexample()
    assert report.final == 3 * 5


@pytest.fixture(scope="module")
def racy_moto(
    aws_test_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A moto_server that spills every value to a temporary file.

    moto checks ``If-None-Match`` and then stores, with no lock between; the file write in
    between releases the GIL, so concurrent creators reliably overlap in that window.
    """
    env = {"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": "1"}
    with moto(tmp_path_factory.mktemp("racy-moto-log"), env=env) as endpoint:
        yield endpoint


@pytest.mark.xfail(
    strict=True,
    raises=AtomicityViolationError,
    reason="moto's conditional PutObject is check-then-store without a lock, so concurrent "
    "creators of one key can both win; if this passes, moto became atomic",
)
def test_moto_lets_two_racers_win_one_key(racy_moto: str) -> None:
    box = from_url(f"s3://{BUCKET}/moto-race-{uuid.uuid4().hex[:8]}", endpoint_url=racy_moto)
    # One key per round makes all 16 racers collide at once. About one round in seven
    # shows two winners here, so 80 rounds all passing by luck has odds below 1e-5.
    for round_number in range(80):
        report = race_put_if_absent(box, racers=16, keys=1, prefix=f"r{round_number}")
        assert report.errors == {}, report.counterexample()  # any other failure is real
        if report.multiple_winners():
            raise AtomicityViolationError(report.counterexample())
        _assert_one_winner_per_key(report)
