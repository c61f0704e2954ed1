"""What S3, GCS and Azure share through ``ObjectStoreMailbox``, run on each of them.

The constructor, URLs that survive pickling, the error boundary that maps SDK exceptions and
nothing else, and the per-process client. Lost responses and retries through the fault
proxy are in test_cloud_faults.py.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from gradientmail import BucketNotFoundError
from gradientmail.backends._object_store import ObjectStoreMailbox
from tests.support.rigs import Rig

pytestmark = pytest.mark.emulator

RIGS = {"s3": "rig_s3_moto", "gcs": "rig_gcs", "azure": "rig_azure"}


@pytest.fixture(params=sorted(RIGS))
def store_rig(request: pytest.FixtureRequest) -> Rig:
    return request.getfixturevalue(RIGS[request.param])  # type: ignore[no-any-return]


@pytest.fixture
def store(store_rig: Rig) -> Iterator[ObjectStoreMailbox]:
    box = store_rig.fresh()
    assert isinstance(box, ObjectStoreMailbox)
    yield box
    box.close()


def test_every_object_store_has_the_same_constructor(
    store_rig: Rig, store: ObjectStoreMailbox
) -> None:
    assert store.put_if_absent("k", b"v")
    again = type(store)(store.container, store.prefix, **store_rig.kwargs)
    assert again.url == store.url
    assert again.get("k") == b"v"
    assert store.object_name_prefix == store.prefix + "/"
    assert again.max_key_bytes == 1024 - len(store.object_name_prefix.encode())


def test_a_pickled_mailbox_reopens_exactly_its_prefix(
    store_rig: Rig, store: ObjectStoreMailbox
) -> None:
    # '%41' must not come back as 'A', nor '?' and '#' as a query and a fragment.
    odd = type(store)(store.container, store.prefix + "/run%41?x#y", **store_rig.kwargs)
    assert odd.put_if_absent("k", b"odd")
    clone = pickle.loads(pickle.dumps(odd))
    assert clone.object_name_prefix == store.prefix + "/run%41?x#y/"
    assert clone.get("k") == b"odd"
    assert list(store.list()) == ["run%41?x#y/k"]


class _Bug(Exception):
    """Stands for a bug in gradientmail's own code, raised where the SDK is called."""


class _BuggyClient:
    def __getattr__(self, name: str) -> Any:
        raise _Bug(f"client.{name}")


@pytest.mark.parametrize(
    "operation",
    [
        lambda box: box.put_if_absent("k", b"v"),
        lambda box: box.get("k"),
        lambda box: box.put("k", b"v"),
        lambda box: box.delete("k"),
        lambda box: list(box.list()),
    ],
    ids=["put_if_absent", "get", "put", "delete", "list"],
)
def test_our_own_bugs_propagate_as_themselves_not_as_store_errors(
    store: ObjectStoreMailbox, monkeypatch: pytest.MonkeyPatch, operation: Any
) -> None:
    monkeypatch.setattr(store, "_client", _BuggyClient)
    with pytest.raises(_Bug):
        operation(store)


def test_sdk_errors_still_become_store_errors(store_rig: Rig, store: ObjectStoreMailbox) -> None:
    missing = type(store)("no-such-container-gm", "p", **store_rig.kwargs)
    with pytest.raises(BucketNotFoundError) as caught:
        missing.put("k", b"v")
    assert caught.value.__cause__ is not None  # the SDK's exception, chained


def _use_in_child(box: ObjectStoreMailbox, results: Any) -> None:
    results.put((id(box._client()), box.put_if_absent("from-child", b"c")))


def test_a_forked_child_makes_its_own_client(store: ObjectStoreMailbox) -> None:
    store.put("k", b"v")
    parent_client = id(store._client())
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_use_in_child, args=(store, results))
    child.start()
    child_client, claimed = results.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0
    assert claimed is True
    assert child_client != parent_client
    assert store.get("from-child") == b"c"  # the parent's client still works
    assert id(store._client()) == parent_client


def test_a_client_lock_held_at_fork_time_does_not_hang_the_child(
    store: ObjectStoreMailbox,
) -> None:
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with store._client_lock:  # another thread of the parent is making a client right now
        child = context.Process(target=_use_in_child, args=(store, results))
        child.start()
    _, claimed = results.get(timeout=60)
    child.join(60)
    assert (child.exitcode, claimed) == (0, True)
