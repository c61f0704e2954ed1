"""The Mailbox contract on every backend (memory, file, S3, GCS, Azure), via one ``box``."""

from __future__ import annotations

import pickle

import pytest

from gradientmail import (
    Capability,
    ConfigurationError,
    InvalidDataError,
    InvalidKeyError,
    KeyNotFoundError,
    Mailbox,
    NotSupportedError,
    Version,
)


def test_put_if_absent_creates_once(box: Mailbox) -> None:
    assert box.put_if_absent("claim", b"first") is True
    assert box.put_if_absent("claim", b"second") is False
    assert box.get("claim") == b"first"


def test_get_missing_raises_key_not_found(box: Mailbox) -> None:
    with pytest.raises(KeyNotFoundError) as info:
        box.get("nope")
    assert isinstance(info.value, LookupError)
    assert "nope" in str(info.value)


def test_put_overwrites_and_delete_removes(box: Mailbox) -> None:
    box.put("k", b"one")
    box.put("k", b"two")
    assert box.get("k") == b"two"
    box.delete("k")
    with pytest.raises(KeyNotFoundError):
        box.get("k")
    assert list(box.list()) == []


def test_delete_missing_key_is_not_an_error(box: Mailbox) -> None:
    box.put("kept", b"value")
    box.delete("never-existed")
    box.delete("deep/never/existed")
    # Deleting nothing leaves nothing behind: no key, no placeholder that blocks a create,
    # and the neighbouring key untouched.
    assert list(box.list()) == ["kept"]
    assert box.get("kept") == b"value"
    assert box.put_if_absent("never-existed", b"now")
    assert box.put_if_absent("deep/never/existed", b"now")
    assert list(box.list()) == ["deep/never/existed", "kept", "never-existed"]


def test_put_if_absent_after_delete_succeeds(box: Mailbox) -> None:
    assert box.put_if_absent("k", b"1")
    box.delete("k")
    assert box.put_if_absent("k", b"2")
    assert box.get("k") == b"2"


@pytest.mark.parametrize(
    "value",
    [b"", b"\x00\xff" * 3, bytes(range(256)), bytearray(b"mutable"), memoryview(b"view")],
    ids=["empty", "binary", "all-bytes", "bytearray", "memoryview"],
)
def test_any_bytes_round_trip(box: Mailbox, value: bytes) -> None:
    assert box.put_if_absent("v", value)
    assert box.get("v") == bytes(value)


def test_large_value_round_trips(box: Mailbox) -> None:
    value = bytes(i % 251 for i in range(3 * 1024 * 1024 + 7))
    box.put("big", value)
    assert box.get("big") == value


def test_non_bytes_value_is_rejected_before_writing(box: Mailbox) -> None:
    with pytest.raises(InvalidDataError, match="encode"):
        box.put_if_absent("k", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidDataError):
        box.put("k", 42)  # type: ignore[arg-type]
    assert list(box.list()) == []


def test_key_and_key_slash_child_coexist(box: Mailbox) -> None:
    assert box.put_if_absent("a", b"parent")
    assert box.put_if_absent("a/b", b"child")
    assert box.put_if_absent("a/b/c", b"grandchild")
    assert box.get("a") == b"parent"
    assert box.get("a/b") == b"child"
    assert list(box.list()) == ["a", "a/b", "a/b/c"]
    box.delete("a")
    assert list(box.list()) == ["a/b", "a/b/c"]


def test_child_created_before_parent_coexists(box: Mailbox) -> None:
    assert box.put_if_absent("p/a/b", b"deep")
    assert box.put_if_absent("p/a", b"shallow")
    assert box.get("p/a") == b"shallow"
    assert list(box.list("p/")) == ["p/a", "p/a/b"]


def test_list_is_a_plain_string_prefix_in_ascending_order(box: Mailbox) -> None:
    keys = ["a/1", "a/2", "ab", "a", "b", "a b", "a!", "a/1/x", "z/é", "z/e"]
    for key in keys:
        box.put(key, key.encode())
    assert list(box.list()) == sorted(keys)
    assert list(box.list("a/")) == ["a/1", "a/1/x", "a/2"]
    assert list(box.list("a")) == sorted(k for k in keys if k.startswith("a"))
    assert list(box.list("ab")) == ["ab"]
    assert list(box.list("a/1")) == ["a/1", "a/1/x"]
    assert list(box.list("nothing")) == []


def test_list_sees_keys_right_after_create(box: Mailbox) -> None:
    for i in range(5):
        assert box.put_if_absent(f"raw/{i}", b"x")
        assert f"raw/{i}" in set(box.list("raw/"))
        assert box.get(f"raw/{i}") == b"x"


def test_list_is_lazy_and_checks_the_prefix_at_call_time(box: Mailbox) -> None:
    with pytest.raises(InvalidKeyError):
        box.list("\x00")
    box.put("k1", b"")
    box.put("k2", b"")
    iterator = box.list()
    assert next(iterator) == "k1"
    assert next(iterator) == "k2"


def test_list_pages_past_a_thousand_keys(box: Mailbox) -> None:
    keys = [f"many/{i:05d}" for i in range(1105)]
    for key in keys:
        box.put(key, b"")
    assert list(box.list("many/")) == keys
    assert list(box.list("many/001")) == keys[100:200]  # a sub-prefix within the pages


@pytest.mark.parametrize(
    "key",
    [
        "with space",
        "per%cent",
        "plus+sign",
        "unicodé/ключ/鍵",
        "emoji/🙂",
        "MAX-BYTES",
        "a/" + "é" * 400 + "/b",
        "dots.in.name/..ok/.hidden",
        "tilde~and=equals&amp;?q#h",
    ],
    ids=[
        "space",
        "percent",
        "plus",
        "unicode",
        "emoji",
        "max-bytes",
        "long-segment",
        "dots",
        "url-chars",
    ],
)
def test_unusual_valid_keys_round_trip(box: Mailbox, key: str) -> None:
    if key == "MAX-BYTES":
        key = "x" * box.max_key_bytes  # 1024, less an object store's prefix
    assert box.put_if_absent(key, key.encode())
    assert box.put_if_absent(key, b"again") is False
    assert box.get(key) == key.encode()
    assert list(box.list()) == [key]
    box.delete(key)
    assert list(box.list()) == []


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("", "empty"),
        ("/lead", "start with '/'"),
        ("trail/", "empty segment"),
        ("a//b", "empty segment"),
        (".", "'.' segment"),
        ("..", "'..' segment"),
        ("a/./b", "'.' segment"),
        ("a/../b", "'..' segment"),
        ("../escape", "'..' segment"),
        ("nul\x00", "control"),
        ("tab\tkey", "control"),
        ("new\nline", "control"),
        ("del\x7f", "control"),
        ("c1\x85", "control"),
        ("back\\slash", "backslash"),
        ("x" * 1025, "at most 10[0-9][0-9] bytes"),
        ("é" * 513, "at most 10[0-9][0-9] bytes"),
        ("lone\ud800surrogate", "UTF-8"),
        (b"bytes", "must be a str"),
        (None, "must be a str"),
        (7, "must be a str"),
    ],
    ids=lambda v: repr(v)[:20],
)
def test_invalid_keys_name_the_rule_and_write_nothing(box: Mailbox, key: object, rule: str) -> None:
    operations = [
        lambda: box.put_if_absent(key, b"x"),  # type: ignore[arg-type]
        lambda: box.put(key, b"x"),  # type: ignore[arg-type]
        lambda: box.get(key),  # type: ignore[arg-type]
        lambda: box.delete(key),  # type: ignore[arg-type]
    ]
    for operation in operations:
        with pytest.raises(InvalidKeyError, match=rule) as info:
            operation()
        assert isinstance(info.value, ValueError)
        assert info.value.rule
    assert list(box.list()) == []


def test_keys_longer_than_the_limit_are_rejected_before_any_request(box: Mailbox) -> None:
    assert 900 <= box.max_key_bytes <= 1024
    with pytest.raises(InvalidKeyError, match=f"at most {box.max_key_bytes} bytes"):
        box.put_if_absent("y" * (box.max_key_bytes + 1), b"x")
    assert list(box.list()) == []


def test_invalid_prefix_is_rejected(box: Mailbox) -> None:
    with pytest.raises(InvalidKeyError, match="control"):
        box.list("a\nb")
    with pytest.raises(InvalidKeyError, match="start with '/'"):
        box.list("/abs")


def test_capabilities_are_declared(rig: object) -> None:
    """Every built-in backend declares both atomic operations; sharing follows the store,
    and partial listings start in the store everywhere but Azure (see
    test_list_start_after.py)."""
    from tests.support.rigs import Rig

    assert isinstance(rig, Rig)
    box = rig.fresh()
    expected = {Capability.ATOMIC_CREATE, Capability.COMPARE_AND_SWAP}
    if rig.cross_process:
        expected.add(Capability.SHARED_ACROSS_PROCESSES)
    if rig.name != "azure":
        expected.add(Capability.LIST_START_AFTER)
    assert set(box.capabilities) == expected
    for capability in Capability:
        assert box.supports(capability) is (capability in expected), capability
    with pytest.raises(ConfigurationError, match=r"Capability\.COMPARE_AND_SWAP"):
        box.supports("compare-and-swap")  # type: ignore[arg-type]


def test_compare_and_swap(box: Mailbox) -> None:
    box.put("k", b"v1")
    data, v1 = box.get_versioned("k")
    assert data == b"v1"
    assert isinstance(v1, Version)
    v2 = box.put_if_match("k", b"v2", v1)
    assert isinstance(v2, Version)
    assert v2 != v1
    assert box.get("k") == b"v2"
    # The stale version changes nothing.
    assert box.put_if_match("k", b"stale", v1) is None
    assert box.get_versioned("k") == (b"v2", v2)


def test_a_backend_without_compare_and_swap_refuses_it_and_writes_nothing() -> None:
    """The branch no built-in backend takes: compare-and-swap not declared."""
    from gradientmail.backends.memory import MemoryMailbox

    class CreateOnly(MemoryMailbox):
        capabilities = frozenset({Capability.ATOMIC_CREATE})

    box = CreateOnly("contract-create-only")
    box.put("k", b"v")
    _, version = MemoryMailbox("contract-create-only").get_versioned("k")
    with pytest.raises(NotSupportedError, match="COMPARE_AND_SWAP"):
        box.get_versioned("k")
    with pytest.raises(NotSupportedError, match="COMPARE_AND_SWAP"):
        box.put_if_match("k", b"swapped", version)
    assert box.get("k") == b"v"


def test_compare_and_swap_on_missing_key_returns_none(box: Mailbox) -> None:
    box.put("k", b"v1")
    _, version = box.get_versioned("k")
    box.delete("k")
    assert box.put_if_match("k", b"again", version) is None
    with pytest.raises(KeyNotFoundError):
        box.get_versioned("k")


def test_version_of_rewritten_value_never_repeats(box: Mailbox) -> None:
    """A rewrite gets a new version, except where a version names the bytes (S3's ETag)."""
    box.put("k", b"same")
    _, first = box.get_versioned("k")
    box.put("k", b"same")
    _, second = box.get_versioned("k")
    if getattr(box, "versions_name_bytes", False):
        assert first == second  # the promise is about bytes: identical bytes, same version
        box.put("k", b"other")
        assert box.put_if_match("k", b"x", first) is None
        return
    assert first != second
    assert box.put_if_match("k", b"x", first) is None


def test_put_if_match_rejects_a_non_version(box: Mailbox) -> None:
    box.put("k", b"v")
    with pytest.raises(InvalidDataError, match="Version"):
        box.put_if_match("k", b"x", "etag")  # type: ignore[arg-type]
    assert box.get("k") == b"v"


def test_mailbox_pickles_and_sees_the_same_keys(box: Mailbox) -> None:
    box.put_if_absent("shared", b"yes")
    clone = pickle.loads(pickle.dumps(box))
    assert clone.url == box.url
    assert clone.get("shared") == b"yes"
    assert clone.put_if_absent("shared", b"no") is False


def test_two_handles_on_one_url_compete(rig: object) -> None:
    from tests.support.rigs import Rig

    assert isinstance(rig, Rig)
    url = rig.url()

    one = rig.open(url)
    two = rig.open(url)
    assert one.put_if_absent("k", b"one")
    assert two.put_if_absent("k", b"two") is False
    assert two.get("k") == b"one"
