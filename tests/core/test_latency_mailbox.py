"""``gradientmail.testing.LatencyMailbox``: delegates, counts by kind, waits drawn latencies."""

from __future__ import annotations

import pickle
import random
import threading
import uuid

import pytest

from gradientmail import Capability, ConfigurationError, KeyNotFoundError, Mailbox, from_url
from gradientmail.testing import (
    NO_LATENCY,
    S3_LIKE,
    Latency,
    LatencyMailbox,
    RequestCounts,
    key_group,
)


def fresh() -> Mailbox:
    return from_url(f"memory://latency-{uuid.uuid4().hex}")


def typed(box: LatencyMailbox) -> Mailbox:
    return box  # mypy: the wrapper satisfies the protocol without a cast


def test_every_operation_is_delegated_and_counted_by_kind() -> None:
    inner = fresh()
    box = LatencyMailbox(inner)
    assert isinstance(typed(box), Mailbox)
    assert box.put_if_absent("units/a", b"1") is True
    assert box.put_if_absent("units/a", b"2") is False
    assert box.get("units/a") == b"1"
    data, version = box.get_versioned("units/a")
    assert data == b"1"
    assert box.put_if_match("units/a", b"3", version) is not None
    assert inner.get("units/a") == b"3"  # the write reached the wrapped mailbox
    box.put("epochs/2/done/a", b"x")
    box.delete("leases/l1")
    with pytest.raises(KeyNotFoundError):
        box.get("units/missing")  # the inner error, unchanged
    assert list(box.list("units/")) == ["units/a"]
    counts = box.counts()
    assert counts["create", "units"] == 2
    assert counts["get", "units"] == 2
    assert counts["get_versioned", "units"] == 1
    assert counts["swap", "units"] == 1
    assert counts["put", "done"] == 1  # grouped after epochs/{k}/
    assert counts["delete", "leases"] == 1
    assert counts["list_page", "units"] == 1
    assert counts.total() == 9
    assert counts.by_operation()["create"] == 2
    assert box.url == inner.url
    assert box.capabilities == inner.capabilities
    assert box.supports(Capability.COMPARE_AND_SWAP)
    assert box.max_key_bytes == inner.max_key_bytes


def test_listing_is_counted_once_per_page_and_only_as_far_as_it_is_read() -> None:
    inner = fresh()
    for i in range(25):
        inner.put(f"k/{i:02d}", b"")
    box = LatencyMailbox(inner, page_size=10)
    assert len(list(box.list("k/"))) == 25
    assert box.counts().total("list_page") == 3
    box.reset_counts()
    iterator = box.list("k/")
    for _ in range(10):
        next(iterator)
    assert box.counts().total("list_page") == 1  # the second page was never asked for
    assert list(box.list("none/")) == []
    assert box.counts()["list_page", "none"] == 1  # an empty listing is one request


def test_each_request_waits_one_latency_from_the_seeded_distribution() -> None:
    waits: list[float] = []
    latency = Latency(0.010, 0.040)
    box = LatencyMailbox(fresh(), latency, seed=7, sleep=waits.append)
    box.put_if_absent("a", b"")
    box.get("a")
    list(box.list(""))
    expected_rng = random.Random(7)
    assert waits == [latency.draw(expected_rng) for _ in range(3)]
    assert all(w > 0 for w in waits)


def test_latency_fits_its_median_and_99th_percentile() -> None:
    rng = random.Random(1)
    draws = sorted(S3_LIKE.draw(rng) for _ in range(20_000))
    assert draws[10_000] == pytest.approx(S3_LIKE.p50, rel=0.05)
    assert draws[19_800] == pytest.approx(S3_LIKE.p99, rel=0.15)
    assert Latency(0.02, 0.02).draw(rng) == 0.02
    assert NO_LATENCY.draw(rng) == 0.0
    with pytest.raises(ConfigurationError, match="p50 <= p99"):
        Latency(0.05, 0.01)


def test_counts_are_exact_under_threads_and_add_up() -> None:
    box = LatencyMailbox(fresh())

    def work(n: int) -> None:
        for i in range(200):
            box.put_if_absent(f"units/{n}-{i}", b"")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert box.counts()["create", "units"] == 1600
    doubled = box.counts() + box.counts()
    assert isinstance(doubled, RequestCounts)
    assert doubled.total() == 3200


def test_a_pickled_wrapper_reopens_the_store_with_fresh_counts() -> None:
    box = LatencyMailbox(fresh(), S3_LIKE, seed=3)
    box.put("k", b"v")
    copy = pickle.loads(pickle.dumps(box))
    assert copy.get("k") == b"v"
    assert copy.counts().total() == 1
    assert copy.latency == S3_LIKE


def test_key_group() -> None:
    assert key_group("units/u1") == "units"
    assert key_group("epochs/3/done/u1") == "done"
    assert key_group("manifest") == "manifest"
    assert key_group("") == ""
