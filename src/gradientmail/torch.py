"""``gradientmail.torch``: the DataLoader adapter, and one model trained by unequal learners.

:class:`Exchange`, :class:`ExchangeBatchSampler` (a DataLoader's batches of the size an
Exchange asks for) and :func:`load_shared` are documented in ``docs/exchange.md``; below,
the DataLoader adapter: a ``shared_queue`` as an ``IterableDataset``.

Needs torch (``pip install 'gradientmail[torch]'``, or any torch >= 2.13 you already have);
``import gradientmail`` never imports this module::

    import gradientmail
    from gradientmail.torch import SharedQueueDataset, SharedQueueLoader

    box = gradientmail.from_url("s3://bucket/run-7")       # every rank opens the same URL
    dataset = SharedQueueDataset(shards, mailbox=box, load=load_shard)
    loader = SharedQueueLoader(dataset, batch_size=32, num_workers=4, persistent_workers=True)
    for epoch in range(3):
        dataset.set_epoch(epoch)
        for batch in loader:
            train(batch)

Guarantees
    * **Every unit once per epoch, across all workers of all ranks.** Each DataLoader
      worker runs its own ``shared_queue`` learner, named ``{learner_id}-w{worker}``
      (``learner_id`` alone with ``num_workers=0``); the learners share the units through
      the mailbox. ``learner_id`` defaults to :func:`gradientmail.learner_id`, so each rank
      of a torchrun or SLURM job has its own and ``gradientmail status`` lists a rank's
      workers right after it.
    * **An epoch ends when no unit is free.** A worker's iteration ends as soon as every
      unit is claimed (``shared_queue(wait_for_others=False)``): it never waits for units
      another worker or rank holds, which would deadlock lockstep training and a DataLoader
      that collects its workers' batches in order. Units held by a worker or rank that dies
      are finished when it restarts under the same learner id (same rank, same
      ``num_workers``), which resumes them first; until then ``gradientmail status`` shows
      them in progress. ``wait_for_others=True`` waits instead, and takes over the units of
      learners that died: only without lockstep training, and with ``num_workers=0``.
    * **Epochs.** :meth:`SharedQueueDataset.set_epoch` ``(k)`` makes the next iteration
      epoch ``k`` (``shared_queue(epoch=k)``, with the ``shuffle`` seed). The epoch lives in
      shared memory, so workers kept by ``persistent_workers=True`` see it too. Iterating
      again without ``set_epoch`` repeats the same epoch, which is then already done and
      yields nothing, like a resumed run whose epoch is complete: a ``RuntimeWarning``
      (from each worker) says so and names ``set_epoch``.
    * **Leaving early loses nothing.** :class:`SharedQueueLoader` takes DataLoader's
      arguments. A worker records a unit done only once the training loop has asked for the
      batch after the one holding the unit's last item. Batches torch drops when the loop
      leaves early (a ``break``, an exception) leave their units undone, and the worker
      releases them, so the same epoch can be completed later. A loop that runs to the end
      gets its ``StopIteration`` only once every worker recorded its last units. A plain
      ``DataLoader`` with ``num_workers`` > 0 is refused with
      :class:`~gradientmail.ConfigurationError`, since there a worker cannot tell the
      batches the loop took from those torch dropped. With ``drop_last=True`` the items
      of each worker's last, partial batch are dropped by torch; their units stay undone,
      and ``gradientmail status`` says so.
    * **No silent duplicates.** A mailbox that is not shared across processes
      (``memory://``) is refused with :class:`~gradientmail.ConfigurationError` in
      a DataLoader worker and in a ``torch.distributed`` job of more than one process: each
      process would get its own copy of the store and deliver every unit again.
    * **Errors name the unit and the worker.** An exception from ``load`` or the store
      ends that worker's iteration; the DataLoader raises it in the training loop as the
      same type (:class:`~gradientmail.WorkerError`,
      :class:`~gradientmail.LeaseLostError`, ...), its message naming the unit, the
      learner id (``rank0-w1``) and the worker process.
    * **Progress.** Each worker reports to a :class:`~gradientmail.session.Session` under
      its learner id, which counts one step and one sample per item and publishes the
      worker's units and data wait. With ``num_workers=0`` a Session for ``learner_id``
      already entered in the training loop's thread is used instead (and counts what the
      loop counts).
    * **Own connections.** Each worker process opens its own mailbox handle from the
      mailbox's URL and options, so no connection or descriptor is shared across a fork.

``units``, ``load`` and the mailbox travel to the workers by pickling when the DataLoader
spawns them (``multiprocessing_context="spawn"``): use module-level functions for ``load``.
"""

from __future__ import annotations

from gradientmail._exchange.learner import Exchange
from gradientmail._exchange.loading import load_shared
from gradientmail._exchange.rules import Average, DelayedNesterov
from gradientmail._exchange.sampler import ExchangeBatchSampler
from gradientmail._exchange.stats import ExchangeStats, ExchangeTraffic, NoiseGain
from gradientmail._torch_data.dataset import SharedQueueDataset
from gradientmail._torch_data.loader import SharedQueueLoader

__all__ = [
    "Average",
    "DelayedNesterov",
    "Exchange",
    "ExchangeBatchSampler",
    "ExchangeStats",
    "ExchangeTraffic",
    "NoiseGain",
    "SharedQueueDataset",
    "SharedQueueLoader",
    "load_shared",
]
