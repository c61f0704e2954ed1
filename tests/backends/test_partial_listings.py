"""Partial listings start in the store: what ``list(prefix, start_after=k)`` costs.

The keys a partial listing returns are checked on every backend in
tests/contract/test_list_start_after.py. Here: S3 and GCS send the start point with the
listing and fetch only the pages after it (counted at the proxy, with the page size
lowered to 3), Azure, which does not declare the capability, fetches the whole listing;
and file:// skips whole directories before the start point without opening them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradientmail import Capability, Mailbox
from gradientmail.backends import _local_layout as local_layout
from gradientmail.backends._object_store import ObjectStoreMailbox, start_hint
from gradientmail.backends.local import FileMailbox
from tests.backends.test_cloud_faults import PROFILES, FaultProfile
from tests.support.faultproxy import FaultProxy

KEYS = [f"k{i:02d}" for i in range(12)]  # four pages of three


# -- object stores, through the proxy --------------------------------------------------------------

#: Backend → how its start point appears in a listing request's query (``None``: it sends none).
START_PARAMETER = {"s3": "start-after", "gcs": "startOffset", "azure": None}


@pytest.fixture(params=sorted(START_PARAMETER))
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def profile(store: str) -> FaultProfile:
    return PROFILES[store]


@pytest.fixture
def proxy(request: pytest.FixtureRequest, profile: FaultProfile) -> Iterator[FaultProxy]:
    with FaultProxy(request.getfixturevalue(profile.endpoint)) as running:
        yield running


@pytest.fixture
def paged(request: pytest.FixtureRequest, profile: FaultProfile, proxy: FaultProxy) -> Mailbox:
    """A fresh mailbox through ``proxy`` holding :data:`KEYS`, listing 3 names a page."""
    box = profile.open_through(request.getfixturevalue(profile.rig), proxy.url)
    assert isinstance(box, ObjectStoreMailbox)
    box.page_size = 3
    for key in KEYS:
        box.put(key, b"")
    return box


def _pages(
    proxy: FaultProxy, profile: FaultProfile, listing: Iterator[str]
) -> tuple[list[str], int]:
    """The keys of ``listing`` and the listing requests it took."""
    before = proxy.count(profile.list_page)
    keys = list(listing)
    return keys, proxy.count(profile.list_page) - before


def _start_sent(proxy: FaultProxy, profile: FaultProfile, parameter: str) -> list[str | None]:
    """The start point each listing request carried, in order (``None``: none)."""
    found = []
    for request in proxy.requests:
        if profile.list_page(request):
            value = re.search(rf"(?:^|&){parameter}=([^&]*)", request.query)
            found.append(unquote(value[1]) if value else None)
    return found


@pytest.mark.emulator
def test_a_partial_listing_near_the_end_fetches_one_page(
    store: str, paged: Mailbox, proxy: FaultProxy, profile: FaultProfile
) -> None:
    full, full_pages = _pages(proxy, profile, paged.list())
    assert full == KEYS
    assert full_pages >= 4
    keys, pages = _pages(proxy, profile, paged.list("", start_after="k09"))  # type: ignore[call-arg]
    assert keys == ["k10", "k11"]
    if START_PARAMETER[store] is None:
        assert not paged.supports(Capability.LIST_START_AFTER)
        assert pages == full_pages  # filtered: the whole listing is fetched
    else:
        assert paged.supports(Capability.LIST_START_AFTER)
        assert pages == 1


@pytest.mark.emulator
def test_a_partial_listing_pages_on_from_its_start(
    store: str, paged: Mailbox, proxy: FaultProxy, profile: FaultProfile
) -> None:
    keys, pages = _pages(proxy, profile, paged.list("k", start_after="k03"))  # type: ignore[call-arg]
    assert keys == KEYS[4:]  # eight keys: pages of 3, 3 and 2
    parameter = START_PARAMETER[store]
    if parameter is None:
        assert pages == 4
        return
    assert pages == 3
    assert isinstance(paged, ObjectStoreMailbox)
    name = paged.object_name_prefix + "k03"  # the key's object name, prefix included
    sent = _start_sent(proxy, profile, parameter)[-3:]
    # S3: StartAfter places the first page, the continuation token the rest. GCS: every
    # page carries startOffset, as the SDK's own iterator sends it.
    assert sent == ([name, None, None] if store == "s3" else [name, name, name])


@pytest.mark.emulator
def test_an_inclusive_start_drops_the_start_key_itself(
    paged: Mailbox, proxy: FaultProxy, profile: FaultProfile
) -> None:
    """GCS's startOffset returns a name equal to it; it must not come back as a key."""
    keys, _ = _pages(proxy, profile, paged.list("", start_after="k10"))  # type: ignore[call-arg]
    assert keys == ["k11"]


@pytest.mark.emulator
def test_a_start_no_store_name_can_hold_is_cut_short_not_sent(
    store: str, paged: Mailbox, proxy: FaultProxy, profile: FaultProfile
) -> None:
    keys, pages = _pages(proxy, profile, paged.list("", start_after="k09\x00\ud800"))  # type: ignore[call-arg]
    assert keys == ["k10", "k11"]
    parameter = START_PARAMETER[store]
    if parameter is not None:
        assert isinstance(paged, ObjectStoreMailbox)
        assert pages == 1
        assert _start_sent(proxy, profile, parameter)[-1] == paged.object_name_prefix + "k09"


@pytest.mark.emulator
def test_a_start_before_the_prefix_sends_no_start(
    store: str, paged: Mailbox, proxy: FaultProxy, profile: FaultProfile
) -> None:
    keys, pages = _pages(proxy, profile, paged.list("k1", start_after="a"))  # type: ignore[call-arg]
    assert keys == ["k10", "k11"]
    assert pages == 1
    parameter = START_PARAMETER[store]
    if parameter is not None:
        assert _start_sent(proxy, profile, parameter)[-1] is None


# -- the start point an object store is sent -------------------------------------------------------


@pytest.mark.parametrize(
    ("start_after", "max_bytes", "hint"),
    [
        ("a/b", 1024, "a/b"),
        ("", 1024, ""),
        ("a/b\x00c", 1024, "a/b"),
        ("a\x9fb", 1024, "a"),  # a C1 control
        ("a\\b", 1024, "a"),
        ("é\ud800x", 1024, "é"),
        ("ab" * 10, 5, "ababa"),
        ("é" * 10, 5, "éé"),  # never half a character
        ("🙂鍵", 6, "🙂"),
    ],
)
def test_start_hint_is_the_longest_leading_part_a_store_can_take(
    start_after: str, max_bytes: int, hint: str
) -> None:
    assert start_hint(start_after, max_bytes) == hint


@given(st.text(max_size=40), st.integers(min_value=0, max_value=60))
@settings(max_examples=300, deadline=None)
def test_start_hint_never_sorts_after_start_after(start_after: str, max_bytes: int) -> None:
    hint = start_hint(start_after, max_bytes)
    assert start_after.startswith(hint)
    assert len(hint.encode("utf-8")) <= max_bytes


# -- file:// ---------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: object) -> FileMailbox:
    box = FileMailbox(str(tmp_path), fsync=False)
    for key in ["a/1", "a/2", "a/3/x", "b", "b/1", "b/2", "c/1", "c/2", "d"]:
        box.put(key, b"")
    return box


def test_file_skips_directories_wholly_before_the_start(
    tree: FileMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered: list[str] = []
    real = local_layout._walk_below

    def watched(parent: int, name: str, *args: object) -> Iterator[str]:
        entered.append(name)
        return real(parent, name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(local_layout, "_walk_below", watched)
    assert list(tree.list(start_after="b/1")) == ["b/2", "c/1", "c/2", "d"]
    assert entered == ["b.d", "c.d"]  # never a.d, nor a.d/3.d
    entered.clear()
    assert list(tree.list()) == sorted(
        ["a/1", "a/2", "a/3/x", "b", "b/1", "b/2", "c/1", "c/2", "d"]
    )
    assert entered == ["a.d", "3.d", "b.d", "c.d"]


def test_file_reads_a_big_directory_from_the_start_in_one_pass(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_layout, "LIST_CHUNK", 3)
    box = FileMailbox(str(tmp_path), fsync=False)
    for key in KEYS:
        box.put(key, b"")
    passes = []
    real = local_layout._read_chunk

    def counted(*args: object) -> object:
        passes.append(args)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(local_layout, "_read_chunk", counted)
    assert list(box.list()) == KEYS
    assert len(passes) == 4  # twelve names, three a pass
    passes.clear()
    assert list(box.list(start_after="k09")) == ["k10", "k11"]
    assert len(passes) == 1  # the nine names before k10 are never held


_SEGMENT = st.text("ab-.é", min_size=1, max_size=3).filter(lambda s: s not in (".", ".."))
_KEY = st.lists(_SEGMENT | st.just("L" * 250), min_size=1, max_size=3).map("/".join)


@given(
    keys=st.lists(_KEY, max_size=12, unique=True),
    prefix=st.sampled_from(["", "a", "a/", "b", "é/", "L"]),
    start_after=_KEY | st.sampled_from(["", "a/", "b/a", "L" * 251, "a\x00", "\U0010ffff"]),
    chunk=st.sampled_from([1, 2, 10_000]),
)
@settings(max_examples=150, deadline=None)
def test_file_partial_listing_is_the_filtered_walk(
    tmp_path_factory: pytest.TempPathFactory,
    keys: list[str],
    prefix: str,
    start_after: str,
    chunk: int,
) -> None:
    """Any keys (long segments split into ``.c`` pieces too), any start, chunked or not."""
    box = FileMailbox(str(tmp_path_factory.mktemp("walk")), fsync=False)
    for key in keys:
        box.put(key, b"")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_layout, "LIST_CHUNK", chunk)
        full = list(box.list(prefix))
        assert full == sorted(k for k in keys if k.startswith(prefix))
        assert list(box.list(prefix, start_after=start_after)) == [
            k for k in full if k > start_after
        ]
