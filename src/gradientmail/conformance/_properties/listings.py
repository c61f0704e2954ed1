"""Partial listings: ``list(prefix, start_after=k)`` against the full listing it stands for.

A mailbox declaring ``Capability.LIST_START_AFTER`` promises that a partial listing holds
exactly the keys of ``list(prefix)`` that sort strictly after ``k``, in the same order,
whatever ``k`` is: a key that exists or not, one outside the prefix, the prefix itself,
``""``. A store that ignores the start point, starts one key late, or loses a key where it
turns a page breaks that promise, and code resuming a listing from its last key then
repeats or skips work. :func:`check_list_start_after` holds the store to it on key sets
drawn by hypothesis, on keys nested below keys, and once across a page boundary.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gradientmail.conformance._context import (
    Context,
    PropertyFailed,
    failure_text,
    key_text,
    require_hypothesis,
    suite_settings,
)
from gradientmail.mailbox import Mailbox

__all__ = ["LISTING_PAGE", "check_list_start_after"]

#: Keys per listing page on every built-in store (memory, S3, GCS, Azure): the
#: deterministic case lists two keys past one page.
LISTING_PAGE = 1000

#: The kinds of ``start_after`` every drawn key set is listed from, in report order.
_START_KINDS = (
    "an existing key",
    "a missing key",
    "a key before the prefix",
    "the prefix itself",
    "a key past every key under the prefix",
    "a key past every key",
    "the empty string",
)

# Characters of drawn key segments: ASCII on both sides of '/', and UTF-8 of 2, 3 and 4
# bytes, whose order as bytes must be the order of the strings.
_CHARS = "Aab-.0~ é鍵🙂"
# Every drawn key set lives under BASE: inside the prefix BASE + "m/", and outside it,
# both before ("l...", "m", "m-...", "m....": '-' and '.' sort before '/') and after
# ("m0...": '0' sorts after '/', "n...", "é...").
_INSIDE = "m/"
_BEFORE = ("l", "m-", "m.")
_AFTER = ("m0", "n", "é")
# Sorts after every character a key under test holds.
_LAST = "\U0010ffff"


def _put_all(box: Mailbox, keys: Sequence[str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: box.put(key, b""), keys))


def _partial(box: Mailbox, prefix: str, start_after: str) -> list[str]:
    """``box.list(prefix, start_after=...)``, or a failure if ``list`` does not take it."""
    lister: Callable[..., Iterator[str]] = box.list
    try:
        return list(lister(prefix, start_after=start_after))
    except TypeError as exc:
        raise PropertyFailed(
            "the mailbox declares Capability.LIST_START_AFTER, but list(prefix, "
            f"start_after=...) raised {type(exc).__name__}: {exc}"
        ) from exc


def _full_listing(ctx: Context, prefix: str, keys: list[str]) -> list[str]:
    """``list(prefix)``, which must hold exactly ``keys`` (sorted), in any order.

    Its order is the ``list-prefixes`` property's concern; a partial listing is held to
    whatever order the full one has.
    """
    full = list(ctx.box.list(prefix))
    if sorted(full) != keys:
        shown = [ctx.short(k) for k in full][:10]
        raise PropertyFailed(
            f"list({key_text(ctx.short(prefix))}) returned {len(full)} keys (from {shown}), "
            f"not the {len(keys)} written, so its partial listings cannot be checked"
        )
    return full


def _difference(
    ctx: Context, prefix: str, start_after: str, what: str, got: list[str], expected: list[str]
) -> str | None:
    """Why ``got`` is not ``expected``, as a counterexample; ``None`` when they are equal."""
    if got == expected:
        return None
    index = next(
        (i for i, (g, e) in enumerate(zip(got, expected, strict=False)) if g != e),
        min(len(got), len(expected)),
    )

    def at(keys: list[str]) -> str:
        return key_text(ctx.short(keys[index])) if index < len(keys) else "nothing"

    early = [ctx.short(k) for k in got if k <= start_after][:3]
    extra = f"; keys at or before start_after returned: {early}" if early else ""
    return (
        f"list({key_text(ctx.short(prefix))}, start_after={key_text(ctx.short(start_after))}) "
        f"({what}) returned {len(got)} keys, the full listing filtered {len(expected)}: "
        f"at #{index} it returned {at(got)}, expected {at(expected)}{extra}"
    )


def _check_across_pages(ctx: Context) -> int:
    """Partial listings of ``LISTING_PAGE + 2`` keys from around the first page's end."""
    box = ctx.box
    keys = [ctx.key(f"pages/{i:05d}") for i in range(LISTING_PAGE + 2)]
    _put_all(box, keys)
    prefix = ctx.key("pages/")
    full = _full_listing(ctx, prefix, keys)
    last_of_page = keys[LISTING_PAGE - 1]
    starts = {
        "the first key: the rest fill one page and spill into the next": keys[0],
        "the last key of the first full page": last_of_page,
        "a missing key between the first page and the second": last_of_page + "/x",
        "the first key of the second page": keys[LISTING_PAGE],
        "a key before the prefix": ctx.key("pages"),
    }
    for what, start_after in starts.items():
        expected = [k for k in full if k > start_after]
        wrong = _difference(
            ctx, prefix, start_after, what, _partial(box, prefix, start_after), expected
        )
        if wrong:
            raise PropertyFailed(wrong)
    return len(starts)


#: Keys that are also directories of other keys, and their neighbours in byte order.
_NESTED = ("a", "a/b", "a/b/c", "a-b", "a0", "b/c", "b0")
#: Starts at such keys, and at missing ones that are directories: a store that lists a
#: directory tree may start after the whole directory, skipping the keys inside it.
_NESTED_STARTS = ("a", "a/b", "a/", "b", "b/")


def _check_nested(ctx: Context) -> int:
    """Partial listings started at keys that are directories of others, or at directories."""
    box = ctx.box
    prefix = ctx.key("nested/")
    keys = sorted(prefix + name for name in _NESTED)
    _put_all(box, keys)
    full = _full_listing(ctx, prefix, keys)
    for name in _NESTED_STARTS:
        start_after = prefix + name
        what = "an existing key with keys below it" if start_after in keys else "a directory"
        expected = [k for k in full if k > start_after]
        got = _partial(box, prefix, start_after)
        wrong = _difference(ctx, prefix, start_after, what, got, expected)
        if wrong:
            raise PropertyFailed(wrong)
    return len(_NESTED_STARTS)


def _check_drawn(ctx: Context) -> int:
    """Hypothesis draws key sets in and around a prefix; every kind of start must agree."""
    hypothesis = require_hypothesis()
    from hypothesis import given
    from hypothesis import strategies as st

    box = ctx.box
    segment = st.text(_CHARS, min_size=1, max_size=3).filter(lambda s: s not in (".", ".."))
    relative = st.lists(segment, min_size=1, max_size=3).map("/".join)
    before = st.just("m") | st.tuples(st.sampled_from(_BEFORE), relative).map("".join)
    after = st.tuples(st.sampled_from(_AFTER), relative).map("".join)
    sets = itertools.count()
    examples = [0]

    @given(
        inside=st.lists(relative, max_size=8, unique=True),
        outside=st.lists(before | after, max_size=4, unique=True),
        data=st.data(),
    )
    def agree(inside: list[str], outside: list[str], data: Any) -> None:
        examples[0] += 1
        base = ctx.key(f"drawn{next(sets)}") + "/"
        prefix = base + _INSIDE
        keys = sorted(prefix + r for r in inside)
        _put_all(box, [*keys, *(base + o for o in outside)])
        full = _full_listing(ctx, prefix, keys)
        existing = data.draw(st.sampled_from(keys)) if keys else prefix + "a"
        missing = prefix + data.draw(relative.filter(lambda r: prefix + r not in keys))
        starts = dict(
            zip(
                _START_KINDS,
                (
                    existing,
                    missing,
                    base + data.draw(before, label="before the prefix"),
                    prefix,
                    prefix + _LAST,
                    base + _LAST,
                    "",
                ),
                strict=True,
            )
        )
        for what, start_after in starts.items():
            expected = [k for k in full if k > start_after]
            got = _partial(box, prefix, start_after)
            wrong = _difference(ctx, prefix, start_after, what, got, expected)
            if wrong:
                raise PropertyFailed(wrong)

    examples_wanted = 10 if ctx.options.quick else 30
    settings = suite_settings(hypothesis, examples_wanted)
    test = hypothesis.seed(ctx.seed)(settings(agree))
    try:
        test()
    except Exception as exc:
        raise PropertyFailed(failure_text(exc)) from exc
    return examples[0]


def check_list_start_after(ctx: Context) -> str:
    """``list(prefix, start_after=k)`` is ``list(prefix)`` without the keys up to ``k``.

    Hypothesis draws key sets inside a prefix and around it (keys sorting just before and
    just after it, non-ASCII characters), and lists each from seven kinds of start: an
    existing key, a missing one, a key before the prefix, the prefix itself, past every
    key under it, past every key, and ``""``. Then keys with keys below them (``a``
    beside ``a/b``) are listed from those keys and from directories (``a/``, a missing
    ``b`` above ``b/c``), and ``LISTING_PAGE + 2`` keys from five points around the end
    of the first page. Each partial listing must equal the full listing filtered to the
    keys sorting strictly after ``start_after``, in the same order; the full listing
    must hold exactly the keys written (its order is ``list-prefixes``'s concern).
    """
    drawn = _check_drawn(ctx)
    nested = _check_nested(ctx)
    starts = _check_across_pages(ctx)
    return (
        f"{drawn} drawn key sets, each listed after {len(_START_KINDS)} kinds of start "
        f"(existing, missing, before the prefix, the prefix, past every key, ''); "
        f"{nested} starts at keys with keys below them; {LISTING_PAGE + 2} keys from "
        f"{starts} starts around a page end: each equals the full listing filtered"
    )
