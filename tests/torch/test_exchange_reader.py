"""The reader of a shared model's current version, and the checks of every head read, on a
fake clock: when a reader gives up on an unreadable version, how it pauses meanwhile, and
when a writer's clock is far enough off to be warned about."""

from __future__ import annotations

import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gradientmail import InvalidDataError, Mailbox, from_url  # noqa: E402 - after importorskip
from gradientmail._exchange.layout import Head, Keys, new_data_token  # noqa: E402
from gradientmail._exchange.reader import UNREADABLE_AFTER_S, VersionReader  # noqa: E402
from gradientmail._exchange.store import SharedStore  # noqa: E402
from gradientmail._exchange.tensors import State  # noqa: E402
from gradientmail._exchange.watch import HeadWatch  # noqa: E402
from tests.support.clock import FakeClock  # noqa: E402


def store_of(box: Mailbox) -> SharedStore:
    return SharedStore(box, Keys("model"), torch.float32, 16, 3, (4, 0))


def publish(store: SharedStore, version: int, values: list[float]) -> Head:
    token, count, size, _ = store.write_state(version, State(torch.tensor(values), torch.zeros(0)))
    head = Head(version, token, count, [[version, token, count]], fragment_size=size)
    store.mailbox.put(store.keys.head, head.encode())
    return head


class Pauses:
    """A pause that moves the fake clock instead of sleeping, and remembers each length."""

    def __init__(self, clock: FakeClock, between: Any = None) -> None:
        self.clock = clock
        self.lengths: list[float] = []
        self.between = between

    def __call__(self, seconds: float) -> None:
        assert len(self.lengths) < 100, "the reader never gave up"
        self.lengths.append(round(seconds, 3))
        self.clock.advance(seconds)
        if self.between is not None:
            self.between()


def test_an_unreadable_version_is_read_again_at_once_then_paused_doubling_up_to_the_bound() -> None:
    box = from_url("memory://exchange-reader-bound")
    store = store_of(box)
    head = publish(store, 0, [1.0, 2.0, 3.0, 4.0])
    box.delete(store.keys.fragment(head.token, 0))
    clock = FakeClock()
    pauses = Pauses(clock)
    reader = VersionReader(store, pause=pauses, clock=clock)
    with pytest.raises(InvalidDataError, match=r"data/.*/00000"):
        reader.current()
    assert pauses.lengths[:6] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert set(pauses.lengths[6:-1]) == {2.0}
    assert sum(pauses.lengths) == pytest.approx(UNREADABLE_AFTER_S)
    assert UNREADABLE_AFTER_S <= 10


def test_a_reader_whose_version_was_collected_reads_the_new_head_without_pausing() -> None:
    box = from_url("memory://exchange-reader-moved")
    store = store_of(box)
    old = publish(store, 0, [1.0, 2.0, 3.0, 4.0])

    class Collecting:
        """Before the first fragment read, a newer version replaces the one being read."""

        def __init__(self) -> None:
            self.armed = True

        def __getattr__(self, name: str) -> Any:
            return getattr(box, name)

        def get(self, key: str) -> bytes:
            if self.armed and "/data/" in key:
                self.armed = False
                publish(store, 1, [5.0, 6.0, 7.0, 8.0])
                box.delete(store.keys.fragment(old.token, 0))
            return box.get(key)

    reading = SharedStore(Collecting(), Keys("model"), torch.float32, 16, 3, (4, 0))  # type: ignore[arg-type]
    clock = FakeClock()
    pauses = Pauses(clock)
    head, _, state = VersionReader(reading, pause=pauses, clock=clock).current()  # type: ignore[misc]
    assert head.version == 1
    assert torch.equal(state.values, torch.tensor([5.0, 6.0, 7.0, 8.0]))
    assert pauses.lengths == []


def head_by(writer: str, version: int, written_at: float) -> Head:
    token = new_data_token(version)
    return Head(version, token, 1, [], written_at=written_at, written_by=writer)


def test_a_head_older_than_one_read_before_is_refused() -> None:
    watch = HeadWatch("exchange/model/head", "me", 600)
    watch.seen(head_by("a", 5, 100.0), 100.0, 100.1)
    watch.seen(head_by("a", 5, 100.0), 101.0, 101.1)  # the same version again: fine
    with pytest.raises(InvalidDataError, match="went back from version 5 to 4"):
        watch.seen(head_by("a", 4, 100.0), 102.0, 102.1)


@pytest.mark.parametrize(
    ("written_at", "warned"),
    [
        (1000.0 + 151, True),  # written after the read ended, by more than 150 s
        (1000.0 + 149, False),
        (900.0 - 151, True),  # written before the previous read began, by more than 150 s
        (900.0 - 149, False),
    ],
)
def test_a_writer_clock_off_by_more_than_a_quarter_window_is_warned_about(
    written_at: float, warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gradientmail.exchange")
    watch = HeadWatch("exchange/model/head", "me", 600)
    watch.seen(head_by("other", 1, 0.0), 900.0, 900.5)  # version 1, read from t=900
    watch.seen(head_by("other", 2, written_at), 999.0, 1000.0)  # version 2 written since
    said = [r.getMessage() for r in caplog.records]
    assert bool(said) == warned, said


def test_the_clock_warning_is_given_once_and_never_about_this_learner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gradientmail.exchange")
    watch = HeadWatch("exchange/model/head", "me", 600)
    watch.seen(head_by("me", 1, 5000.0), 0.0, 1.0)  # its own writes are on its own clock
    assert not caplog.records
    for version in range(2, 5):
        watch.seen(head_by("other", version, 5000.0), 0.0, 1.0)
    assert len(caplog.records) == 1
    assert "'other'" in caplog.records[0].getMessage()
