"""Bad input, fuzzed: ``from_url`` over arbitrary text and every public method over
arbitrary keys and values, on memory:// and file://.

What must hold for every input:

* a rejection is a :class:`GradientMailError` (never a bare ``ValueError``, ``TypeError``
  or ``OSError``);
* a plain path opens exactly that path, and a ``file://`` URL exactly its path decoded
  once;
* nothing is written outside a file:// root: a sentinel directory beside it stays
  untouched, the parent holds nothing new, and no staged debris is left in the root;
* file:// answers every call as memory:// does (same results, same error types).

The examples add up to more than 2,000 per run; each test sets its own count.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gradientmail import (
    Capability,
    ConfigurationError,
    GradientMailError,
    InvalidDataError,
    Mailbox,
    Version,
    from_url,
)
from gradientmail import _urls as urls_module
from gradientmail.backends import _local_layout as local_layout
from gradientmail.backends._options import file_url, split_url
from gradientmail.backends.local import FileMailbox

FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Sandbox:
    """A directory with a sentinel beside the places the examples may write to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sentinel = path / "sentinel"
        self.sentinel.mkdir()
        (self.sentinel / "precious").write_bytes(b"untouched")
        self.places = path / "places"
        self.places.mkdir()

    def place(self) -> Path:
        """A fresh, empty directory for one example."""
        place = self.places / uuid.uuid4().hex[:12]
        place.mkdir()
        return place

    def check(self) -> None:
        assert sorted(os.listdir(self.path)) == ["places", "sentinel"]
        assert os.listdir(self.sentinel) == ["precious"]
        assert (self.sentinel / "precious").read_bytes() == b"untouched"


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    cwd = os.getcwd()
    yield Sandbox(tmp_path)
    os.chdir(cwd)


def _inside(path: str, directory: Path) -> bool:
    return path == str(directory) or path.startswith(str(directory) + os.sep)


def _created(place: Path) -> set[str]:
    return {str(Path(d, name)) for d, dirs, files in os.walk(place) for name in dirs + files}


def _assert_only_root_made(place: Path, root: str) -> None:
    """Below ``place`` exist only ``root``, its parents, and what lies inside ``root``."""
    parents = {str(p) for p in Path(root).parents}
    for made in _created(place):
        assert made in parents or _inside(made, Path(root)), f"{made} was created"


# -- named regressions -----------------------------------------------------------------------


@pytest.fixture(params=["memory", "file"])
def any_box(request: pytest.FixtureRequest, tmp_path: Path) -> Mailbox:
    if request.param == "memory":
        return from_url(f"memory://fuzz-{uuid.uuid4().hex}")
    return from_url(str(tmp_path / "root"), fsync=False)


@pytest.mark.parametrize("value", [[], {}, set(), "compare-and-swap", None, 1, Capability])
def test_supports_refuses_anything_but_a_capability(any_box: Mailbox, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"Capability\.COMPARE_AND_SWAP"):
        any_box.supports(value)
    assert any_box.supports(Capability.ATOMIC_CREATE) is True


def test_a_released_memoryview_value_is_invalid_data(any_box: Mailbox) -> None:
    any_box.put("k", b"v")
    _, version = any_box.get_versioned("k")
    view = memoryview(b"abc")
    view.release()
    for call in (
        lambda: any_box.put_if_absent("new", view),
        lambda: any_box.put("k", view),
        lambda: any_box.put_if_match("k", view, version),
    ):
        with pytest.raises(InvalidDataError, match="cannot be read"):
            call()
    assert any_box.get("k") == b"v"
    assert list(any_box.list()) == ["k"]


# -- from_url ----------------------------------------------------------------------------------

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
#: Schemes that reach a store or the filesystem at a place the URL names: fuzzed below
#: with URLs confined to the sandbox, never with arbitrary text.
_REACHING = {"file", "s3", "gs", "gcs", "az"}

_URLISH = st.builds(
    str.__add__,
    st.sampled_from(["memory://", "MEMORY://", "memory:", "nosuch://", "://", "./", "x/"]),
    st.text(max_size=30),
)


@settings(FUZZ, max_examples=700)
@given(text=st.one_of(st.text(max_size=40), _URLISH))
def test_from_url_on_arbitrary_text_opens_exactly_the_path_or_fails_typed(
    sandbox: Sandbox, text: str
) -> None:
    head = text.split("/", 1)[0]
    scheme = _SCHEME.match(head)
    if scheme:
        name = scheme.group()[:-1].lower()
        assume(name not in _REACHING and name not in urls_module._plugins())
    place = sandbox.place()
    os.chdir(place)
    expected = os.path.normpath(os.path.join(place, text)) if ":" not in head else None
    if expected is not None:
        assume(not text.startswith("/") and _inside(expected, place) and expected != str(place))
    try:
        box = from_url(text, **({} if expected is None else {"fsync": False}))
    except GradientMailError:
        assert expected is None or "\x00" in text or len(expected.encode()) > 255
    else:
        if isinstance(box, FileMailbox):
            assert box.root == expected
            box.put("k", b"v")
            assert list(box.list()) == ["k"]
        else:
            assert expected is None
    if expected is not None:
        _assert_only_root_made(place, expected)
    sandbox.check()


@settings(FUZZ, max_examples=300)
@given(text=st.text(max_size=40))
def test_split_url_fails_only_with_configuration_errors(text: str) -> None:
    try:
        split = split_url(text)
    except ConfigurationError:
        return
    assert isinstance(split.path, str)


@settings(FUZZ, max_examples=400)
@given(
    tail=st.text(max_size=30),
    encoded=st.booleans(),
    host=st.sampled_from(["", "localhost", "alice:pw@", "alice@localhost"]),
    query=st.sampled_from(["", "?fsync=false", "?fsync=maybe", "?colour=blue", "#frag"]),
)
def test_file_urls_open_exactly_their_path_decoded_once_or_fail_typed(
    sandbox: Sandbox, tail: str, encoded: bool, host: str, query: str
) -> None:
    place = sandbox.place()
    written = quote(tail, safe="/", errors="surrogateescape") if encoded else tail
    url = file_url(str(place)).replace("file://", f"file://{host}", 1) + "/" + written + query
    path_text = re.split(r"[?#]", url[len("file://") + len(host) :], maxsplit=1)[0]
    expected = os.path.normpath(unquote(path_text, errors="surrogateescape"))
    assume(_inside(expected, place) and expected != str(place))
    clean = (
        "@" not in host
        and query in ("", "?fsync=false")
        and not re.search(r"[\x00-\x1f\x7f?#]", written)
        and "\x00" not in expected
        and all(len(part.encode("utf-8", "surrogateescape")) <= 255 for part in expected.split("/"))
    )
    refusal: GradientMailError | None = None
    try:
        box = from_url(url)
    except GradientMailError as exc:
        refusal = exc
    if refusal is not None:
        assert not clean, f"{url!r} was refused: {refusal}"
        assert "pw" not in str(refusal)
    else:
        assert isinstance(box, FileMailbox)
        assert box.root == expected
        assert split_url(box.url).netloc == ""  # no user info, no host
        assert repr(box) == f"<FileMailbox url={box.url!r}>"
        _assert_only_root_made(place, expected)
    sandbox.check()


# -- every public method, file:// against memory:// ---------------------------------------------

_SEGMENTS = ["a", "b", "..", ".", "", "a.v", "b.d", ".tmp", ".locks", "x" * 250, "é", "%2F", "?"]
_KEYS = st.one_of(
    st.lists(st.sampled_from(_SEGMENTS), min_size=1, max_size=4).map("/".join),
    st.text(max_size=12),
    st.binary(max_size=4),
    st.none(),
    st.integers(),
    st.lists(st.integers(), max_size=2),
)
_VALUES = st.one_of(
    st.binary(max_size=32),
    st.builds(bytearray, st.binary(max_size=8)),
    st.binary(max_size=8).map(lambda b: memoryview(b)),
    st.just("released"),
    st.text(max_size=3),
    st.none(),
    st.integers(),
)
_VERSIONS = st.one_of(st.just("last"), st.builds(Version, st.text(max_size=4)), st.none())
_OPS = st.sampled_from(
    ["put_if_absent", "put", "get", "delete", "get_versioned", "put_if_match", "list", "supports"]
)


def _value(value: Any) -> Any:
    if isinstance(value, str) and value == "released":
        view = memoryview(b"gone")
        view.release()
        return view
    return value


def _call(box: Mailbox, last: dict[str, Any], op: str, key: Any, value: Any, version: Any) -> Any:
    if op == "list":
        return list(box.list(key))
    if op == "supports":
        return box.supports(key)
    if op in ("get", "delete"):
        return getattr(box, op)(key)
    if op == "get_versioned":
        data, last["version"] = box.get_versioned(key)
        return data
    if op == "put_if_match":
        chosen = last.get("version") if version == "last" else version
        result = box.put_if_match(key, _value(value), chosen)  # type: ignore[arg-type]  # None on purpose: refused
        if result is not None:
            last["version"] = result
        return result is not None
    return getattr(box, op)(key, _value(value))


def _outcome(box: Mailbox, last: dict[str, Any], step: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return "ok", _call(box, last, *step)
    except GradientMailError as exc:
        return "error", type(exc).__name__
    # Anything else escapes and fails the test: every rejection must be typed.


def _assert_root_holds_only_gradientmail_names(root: Path) -> None:
    assert os.listdir(root / ".tmp") == [], "staged debris left behind"
    for directory, dirs, files in os.walk(root):
        inside = Path(directory).relative_to(root)
        for name in dirs + files:
            if inside == Path("."):
                assert name in (".tmp", ".locks") or name[-2:] in (".v", ".d", ".c"), name
            elif inside != Path(".locks"):
                assert name[-2:] in (".v", ".d", ".c"), f"{inside}/{name}"


@settings(FUZZ, max_examples=700)
@given(steps=st.lists(st.tuples(_OPS, _KEYS, _VALUES, _VERSIONS), min_size=1, max_size=10))
def test_every_method_answers_alike_on_file_and_memory_and_stays_in_its_root(
    sandbox: Sandbox, steps: list[tuple[Any, ...]]
) -> None:
    place = sandbox.place()
    root = place / "root"
    file_box = from_url(str(root), fsync=False)
    memory_box = from_url(f"memory://fuzz-{uuid.uuid4().hex}")
    file_last: dict[str, Any] = {}
    memory_last: dict[str, Any] = {}
    for step in steps:
        expected = _outcome(memory_box, memory_last, step)
        assert _outcome(file_box, file_last, step) == expected, step
    assert os.listdir(place) == ["root"]
    _assert_root_holds_only_gradientmail_names(root)
    sandbox.check()


@pytest.fixture(autouse=True)
def _small_list_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """List in chunks of three names, so the fuzzing also crosses chunk boundaries."""
    monkeypatch.setattr(local_layout, "LIST_CHUNK", 3)
