"""Producer/consumer pipelines: many producers feed many consumers, exactly once.

One API, two transports::

    from gradientmail.patterns.pipeline import Pipeline

    # in one process: objects (GPU tensors) travel by reference between threads
    pipe = Pipeline.in_process(producers=["target-0", "target-1"], capacity=8)
    # across processes and hosts: bytes through any mailbox URL
    pipe = Pipeline.over_mailbox(box, producers=["gen-0", "gen-1"], capacity=8)

    with pipe.producer("target-0") as out:      # in a producer thread or process
        for item in make_items():
            out.put(item)                         # waits while the pipeline is full

    with pipe.consumer("drafter-0") as items:    # in a consumer thread or process
        for item in items:
            train(item)

What you may rely on (``docs/pipeline.md`` states the termination protocol, the mailbox
layout, the costs, and why the simpler protocols fail):

* **Exactly once.** Every item put is returned by exactly one consumer. Over a mailbox each
  item is claimed with ``put_if_absent`` and the claim is read back, so a store that lets
  two claimants win raises ``AtomicityViolationError`` instead of delivering twice.
* **When a consumer dies** (over a mailbox): an item its ``next()`` returned is its own and
  is not delivered again, except possibly the last one, whose delivery is recorded (one
  ``put_if_match`` on its claim) while the loop works on it; a consumer that dies within
  that round trip may see that one item go to another consumer too. Items it had only
  prefetched go to the other consumers, which take them over with compare-and-swap once its
  lease lapses, or at once when it was closed early. A
  consumer paused past its lease raises ``LeaseLostError`` instead of returning an item
  (naming the one item that may have gone twice, if any). ``docs/pipeline.md`` has the
  details; without compare-and-swap, the others raise ``PipelineError`` naming a dead
  consumer's undelivered items instead of losing them.
* **A declared, closed set of producers.** ``producers=`` names every producer up front; an
  undeclared or second registration raises :class:`ProducerRegistrationError`.
* **Consumers stop only at the end**: when every declared producer has finished (``done``,
  ``fail`` or leaving its ``with`` block) *and* every item has been taken (over a mailbox:
  returned by some consumer's ``next()``), never earlier, and never a hang after it. Close
  a consumer you stop iterating (``with``), or the others wait for its prefetched items.
* **Backpressure.** ``capacity`` bounds the items put and not yet taken (over a mailbox,
  ``ceil(capacity / len(producers))`` per producer).
* **Failures arrive after the items before them.** A producer's exception reaches a
  consumer as :class:`ProducerFailedError` naming it; a producer whose lease
  goes unrenewed for ``lease`` seconds as
  :class:`ProducerLostError`; no progress for ``stall_timeout``
  seconds as :class:`PipelineStalledError`; ``pipe.abort()`` as
  :class:`PipelineAbortedError` in every consumer and producer.
* **Ids** of producers and consumers follow gradientmail's one ID rule
  (:func:`gradientmail.patterns.shared_queue.validate_segment`); a bad one raises
  ``ConfigurationError``.

``pipe.stats()`` reports, per handle, items produced and consumed, backpressure time,
consumers' waits, and in process the idle time beside available items and wake-up latency.
"""

from __future__ import annotations

from gradientmail._errors import (
    PipelineAbortedError,
    PipelineError,
    PipelineStalledError,
    ProducerFailedError,
    ProducerLostError,
    ProducerRegistrationError,
)
from gradientmail.patterns.pipeline._api import Pipeline
from gradientmail.patterns.pipeline._roles import Consumer, Producer
from gradientmail.patterns.pipeline._stats import ConsumerStats, PipelineStats, ProducerStats

__all__ = [
    "Consumer",
    "ConsumerStats",
    "Pipeline",
    "PipelineAbortedError",
    "PipelineError",
    "PipelineStalledError",
    "PipelineStats",
    "Producer",
    "ProducerFailedError",
    "ProducerLostError",
    "ProducerRegistrationError",
    "ProducerStats",
]
