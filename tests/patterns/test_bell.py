"""The bell a ``shared_queue`` consumer waits on while its epochs' buffers are empty.

A consumer of several buffers reads ``bell.rings``, looks at every buffer, and only then
waits: an entry put in between must wake it, never leave it asleep beside a full buffer.
"""

from __future__ import annotations

import threading

from gradientmail.patterns._workers import EMPTY, Bell, HandoffBuffer

#: Seconds after which a wait here is a hang.
HANG = 30.0


def waits_in_a_thread(bell: Bell, seen: int) -> threading.Thread:
    thread = threading.Thread(target=bell.wait, args=(seen,), daemon=True)
    thread.start()
    return thread


def test_a_ring_after_looking_and_before_waiting_is_not_missed() -> None:
    bell = Bell()
    seen = bell.rings
    bell.ring()  # between the look and the wait
    waiter = waits_in_a_thread(bell, seen)
    waiter.join(timeout=HANG)
    assert not waiter.is_alive(), "the wait slept past a ring it had not seen"


def test_a_ring_wakes_a_consumer_already_waiting() -> None:
    bell = Bell()
    began = threading.Event()

    class Announcing(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            began.set()
            return super().wait(timeout)

    bell._changed = Announcing()  # the same condition, telling the test the wait began
    waiter = waits_in_a_thread(bell, bell.rings)
    assert began.wait(HANG), "the consumer never waited"
    bell.ring()
    waiter.join(timeout=HANG)
    assert not waiter.is_alive(), "a ring did not wake the waiting consumer"


def test_every_entry_and_the_close_ring_the_bell() -> None:
    bell = Bell()
    buffer: HandoffBuffer[int] = HandoffBuffer(2, bell)
    seen = bell.rings
    assert buffer.put(1)
    assert bell.rings == seen + 1, "an item rang"
    assert buffer.put_control("end")
    assert bell.rings == seen + 2, "a control entry rang"
    buffer.close()
    assert bell.rings == seen + 3, "the close rang"
    assert buffer.get(block=False) == (1, 0.0)
    assert buffer.get(block=False) == ("end", 0.0)
    assert buffer.get(block=False) == (EMPTY, 0.0), "an empty buffer does not block"
