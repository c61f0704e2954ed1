"""The stateful model: hypothesis drives a mailbox and a plain dict side by side.

A :class:`~hypothesis.stateful.RuleBasedStateMachine` applies random sequences of
``put_if_absent``, ``put``, ``get``, ``list``, ``delete`` and (where declared)
``get_versioned`` / ``put_if_match`` to the mailbox and to a ``dict``, and checks after each
step that they agree. Keys are drawn from a small set that collides on purpose (``a``,
``a/b``, ``ab``, ``a b``, ...) and values from a small set that repeats on purpose (so a
version that is a content hash shows up as ABA). A mailbox that declares
``versions_name_bytes`` (S3) is held to that promise instead: a replaced version may match
again only while the key holds the very bytes it named. Any disagreement is shrunk to a
minimal program, which becomes the counterexample. Each program runs in a fresh namespace.

The run is seeded by :attr:`Context.seed`, so ``--seed S`` replays the same programs.
"""

from __future__ import annotations

import itertools
from typing import Any

from gradientmail._errors import KeyNotFoundError
from gradientmail.backends._base import BaseMailbox
from gradientmail.conformance._context import (
    Context,
    PropertyFailed,
    failure_text,
    require_hypothesis,
    suite_settings,
)
from gradientmail.mailbox import Capability, Version

__all__ = ["KEYS", "PREFIXES", "run_model"]

#: Keys the model uses, chosen to collide: nested, sibling and escaped names.
KEYS = ("a", "a/b", "a/b/c", "ab", "a b", "b", "%41", "x+y", "é/ü")
#: Prefixes the model lists.
PREFIXES = ("", "a", "a/", "a/b", "ab", "b", "é")


def run_model(ctx: Context) -> str:
    """Run the state machine against ``ctx.box``; return a summary or raise PropertyFailed."""
    hypothesis = require_hypothesis()
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        RuleBasedStateMachine,
        get_state_machine_test,
        precondition,
        rule,
    )

    box = ctx.box
    cas = box.supports(Capability.COMPARE_AND_SWAP)
    # What a version names (see Version): one write, or the bytes stored (S3).
    by_bytes = isinstance(box, BaseMailbox) and box.versions_name_bytes
    programs = itertools.count()
    steps = [0]
    keys = st.sampled_from(KEYS)
    values = st.sampled_from([b"", b"x", b"yy"]) | st.binary(max_size=32)

    class MailboxModel(RuleBasedStateMachine):
        """The mailbox must behave like ``self.model`` after every step."""

        def __init__(self) -> None:
            super().__init__()
            self.ns = ctx.key(f"m{next(programs)}") + "/"
            self.model: dict[str, bytes] = {}
            self.current: dict[str, Version] = {}  # versions known to be current
            self.stale: dict[str, list[Version]] = {}  # versions known to be replaced
            self.named: dict[Version, bytes] = {}  # the bytes each version was read with

        def _replaced(self, key: str) -> None:
            version = self.current.pop(key, None)
            if version is not None:
                self.stale.setdefault(key, []).append(version)

        def _expect(self, key: str, where: str) -> None:
            try:
                got: bytes | None = box.get(self.ns + key)
            except KeyNotFoundError:
                got = None
            expected = self.model.get(key)
            assert got == expected, (
                f"{where}: get({key!r}) returned {got!r}, model has {expected!r}"
            )

        @rule(key=keys, data=values)
        def put_if_absent(self, key: str, data: bytes) -> None:
            steps[0] += 1
            won = box.put_if_absent(self.ns + key, data)
            expected = key not in self.model
            assert won == expected, f"put_if_absent({key!r}) returned {won}, expected {expected}"
            if won:
                self.model[key] = data

        @rule(key=keys, data=values)
        def put(self, key: str, data: bytes) -> None:
            steps[0] += 1
            box.put(self.ns + key, data)
            self.model[key] = data
            self._replaced(key)

        @rule(key=keys)
        def get(self, key: str) -> None:
            steps[0] += 1
            self._expect(key, "get")

        @rule(key=keys)
        def delete(self, key: str) -> None:
            steps[0] += 1
            box.delete(self.ns + key)
            self.model.pop(key, None)
            self._replaced(key)

        @rule(prefix=st.sampled_from(PREFIXES))
        def list(self, prefix: str) -> None:
            steps[0] += 1
            got = [k[len(self.ns) :] for k in box.list(self.ns + prefix)]
            expected = sorted(k for k in self.model if k.startswith(prefix))
            assert got == expected, f"list({prefix!r}) returned {got}, model has {expected}"

        @precondition(lambda self: cas)
        @rule(key=keys)
        def get_versioned(self, key: str) -> None:
            steps[0] += 1
            try:
                data, version = box.get_versioned(self.ns + key)
            except KeyNotFoundError:
                assert key not in self.model, f"get_versioned({key!r}) raised KeyNotFoundError"
                return
            assert data == self.model.get(key), (
                f"get_versioned({key!r}) returned {data!r}, model has {self.model.get(key)!r}"
            )
            self.current[key] = version
            self.named[version] = data

        @precondition(lambda self: cas and bool(self.current))
        @rule(choice=st.data(), data=values)
        def swap_current(self, choice: Any, data: bytes) -> None:
            steps[0] += 1
            key = choice.draw(st.sampled_from(sorted(self.current)), label="key")
            new = box.put_if_match(self.ns + key, data, self.current[key])
            assert new is not None, f"put_if_match({key!r}) with the current version returned None"
            self._replaced(key)
            self.current[key] = new
            self.named[new] = data
            self.model[key] = data

        @precondition(lambda self: cas and any(self.stale.values()))
        @rule(choice=st.data(), data=values)
        def swap_stale(self, choice: Any, data: bytes) -> None:
            steps[0] += 1
            key = choice.draw(st.sampled_from(sorted(k for k, v in self.stale.items() if v)))
            version = choice.draw(st.sampled_from(self.stale[key]), label="stale version")
            new = box.put_if_match(self.ns + key, data, version)
            if new is not None and by_bytes and self.named.get(version) == self.model.get(key):
                # Declared: the key holds the bytes this version named, so it matches (ABA).
                self._replaced(key)
                self.current[key] = new
                self.named[new] = data
                self.model[key] = data
                return
            assert new is None, f"put_if_match({key!r}) with a replaced version succeeded " + (
                "while the key held other bytes"
                if by_bytes
                else "(versions must never repeat, even when the same bytes are written again)"
            )
            self._expect(key, "after a refused put_if_match")

    examples = 10 if ctx.options.quick else 40
    step_count = 15 if ctx.options.quick else 30
    settings = suite_settings(hypothesis, examples, stateful_step_count=step_count)
    test = hypothesis.seed(ctx.seed)(get_state_machine_test(MailboxModel, settings=settings))
    try:
        test()
    except Exception as exc:
        raise PropertyFailed(failure_text(exc)) from exc
    ops = "put_if_absent, put, get, list, delete" + (", CAS" if cas else "")
    return f"{examples} random programs ({steps[0]} steps of {ops}) agree with a dict"
