"""A pipeline's counters: per producer, per consumer, and the snapshot ``pipe.stats()`` returns.

Each counter is written by the thread that owns its handle (a producer by the thread that
puts, a consumer by the thread that iterates), so a snapshot taken from another thread is
consistent enough for reporting without locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gradientmail.patterns._stats import Latencies, Stats

__all__ = ["ConsumerStats", "PipelineStats", "ProducerStats"]


@dataclass
class ProducerStats(Stats):
    """One producer's counters (only for producers opened through this handle)."""

    #: items put.
    items: int = 0
    #: seconds spent waiting for room (backpressure).
    blocked_s: float = 0.0


@dataclass
class ConsumerStats(Stats):
    """One consumer's counters (only for consumers opened through this handle)."""

    #: items returned by ``next()``.
    items: int = 0
    #: seconds spent inside ``next()`` waiting for an item.
    wait_s: float = 0.0
    #: each ``next()`` call's wait (count, mean, p99, max).
    waits: Latencies = field(default_factory=Latencies)
    #: In process: the part of ``wait_s`` during which an item sat in the buffer, unassigned.
    #: Items go straight to waiting consumers, so this stays near 0 (the microseconds of
    #: taking an item); it is measured, not assumed. ``None`` over a mailbox.
    idle_while_available_s: float | None = None
    #: In process: from a producer handing this consumer an item to the consumer running
    #: again (the scheduler's wake-up latency). Empty over a mailbox.
    wake_latency: Latencies = field(default_factory=Latencies)
    #: Mailbox: claims lost to another consumer.
    claims_lost: int = 0
    #: Mailbox: items taken over from consumers that died, were fenced or closed early
    #: before returning them.
    taken_over: int = 0
    #: Mailbox: seconds spent recording deliveries (one ``put_if_match`` per item), in the
    #: background while the loop works on the item.
    deliver_s: float = 0.0
    #: Mailbox: the part of that ``next()`` waited for (when a step was shorter than the
    #: record of the item before it).
    delivery_wait_s: float = 0.0


@dataclass
class PipelineStats:
    """A snapshot of ``pipe.stats()``."""

    producers: dict[str, ProducerStats] = field(default_factory=dict)
    consumers: dict[str, ConsumerStats] = field(default_factory=dict)

    @property
    def produced(self) -> int:
        """Items put by the producers opened through this handle."""
        return sum(s.items for s in self.producers.values())

    @property
    def consumed(self) -> int:
        """Items taken by the consumers opened through this handle."""
        return sum(s.items for s in self.consumers.values())
