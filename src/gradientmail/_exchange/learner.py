"""One learner's side of a shared model: join, exchange in the background, adopt, leave."""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import deque

import torch
from torch.utils.hooks import RemovableHandle

from gradientmail._errors import ConfigurationError
from gradientmail._exchange.batch_check import BatchCheck
from gradientmail._exchange.gradients import GradientMeter, wants_gain
from gradientmail._exchange.handoff import Handoff
from gradientmail._exchange.layout import Keys, frozen_difference
from gradientmail._exchange.options import (
    Settings,
    Storage,
    active_window_seconds,
    build_applier,
    checked_model,
    stepping,
)
from gradientmail._exchange.pace import Work
from gradientmail._exchange.rules import OuterRule, resolve
from gradientmail._exchange.stats import ExchangeStats
from gradientmail._exchange.tensors import ModelTensors, State, difference, kept_for_reuse
from gradientmail._identity import learner_id as launcher_learner_id
from gradientmail.backends._options import positive
from gradientmail.mailbox import Mailbox
from gradientmail.patterns._patience import DEFAULT_PATIENCE_S

__all__ = ["Exchange"]

log = logging.getLogger("gradientmail.exchange")

DEFAULT_FRAGMENT_BYTES = 256 * 2**20


class Exchange:
    """Train one model from learners of unequal speed, through the mailbox.

    Every ``every`` local steps, a background thread applies this learner's progress since
    its anchor (the shared version it last adopted) to the current shared parameters with
    compare-and-swap; a later step adopts the result, keeping the local steps made
    meanwhile. With ``optimizer=`` each ``optimizer.step()`` is a local step (a post-hook
    counts it); without, each call of :meth:`step`. ``docs/exchange.md`` has the rules,
    layout and costs.

    One exchange of a model in ``F`` fragments reads the head twice and, when another
    learner applied since this one's last exchange, ``F`` fragments; it writes ``F``
    fragments and swaps the head: ``2 x`` the model's size in the wire dtype at most, and
    never a LIST but every 16th version's sweep. A lost race adds ``F`` reads, and ``F``
    writes when the swap itself lost.

    Guarantees:
        * Entering publishes ``model``'s parameters if no shared version exists, else loads
          the current one into ``model``: every learner starts from the same weights.
        * Each exchange is applied exactly once, after lost swaps and lost responses alike.
        * No version is ever visible half-written; a killed learner stalls no one.
        * A step never waits for the store. Leaving normally exchanges every change of the
          parameters since the version last adopted (judged by comparing them, so training
          no step counted is not lost) and waits for it; leaving through an exception
          applies nothing more.
        * A newer process with the same ``learner_id`` fences this one: its next step
          raises ``LeaseLostError``.
        * A store outage shorter than ``patience`` is ridden out; a damaged record of the
          shared model is refused at a step with ``InvalidDataError`` naming its key, a
          version that cannot be read within 10 s.

    Args:
        model: the module whose parameters (and, with ``buffers``, buffers) are shared.
        mailbox: a mailbox with compare-and-swap (else ``NotSupportedError``).
        learner_id: this learner's id; :func:`gradientmail.learner_id` by default.
        optimizer: the optimizer that steps ``model``; each of its steps is then counted
            (gradient accumulation counts optimizer steps, not micro-batches), and
            :meth:`step` is not called.
        every: local steps between exchanges.
        outer, outer_lr: the rule (``"average"``, ``"delayed-nesterov"`` or an object) and
            the named rule's step (``None``: its default).
        staleness: the staleness weight's exponent; ``None`` for no weight. With the
            defaults a delta ``tau`` versions stale moves the shared parameters by
            ``delta / (1 + tau)``: a learner alone keeps all of its progress, and ``N``
            equal learners in turn average theirs.
        max_staleness: drop a delta staler than this many versions; ``None`` never drops.
        wire, fragment_bytes: the dtype stored and sent (``"float32"``, ``"bfloat16"``),
            and the largest object written.
        name, keep: the shared model's name (several may share a mailbox); versions kept.
        active_window: seconds after its last exchange a learner stops counting as active
            (600 by default; ``lease=`` is its former name, deprecated). Within it, a
            learner is left out of the group's batch and shares once the others made ten
            of its usual intervals' worth of versions without it, until it exchanges again.
        patience: seconds each request to the store rides out an outage, from its first
            failure (as a shared queue does for its lease); meanwhile steps go on without
            exchanging, and past it the next step raises the store's error.
        buffers: share the persistent buffers too: floating ones (``running_mean``) under
            the outer rule as the parameters, integer ones (``num_batches_tracked``) as
            their largest value. ``False`` keeps every buffer local.
        gain: raise the weight of a delta made on a batch smaller than the group's by the
            noise gain, measured from the learners' gradients, so that in one step time the
            shared model moves as one step on the group's batch would with an adaptive
            optimizer (``docs/exchange.md``, which says when it pays and how to tell).
            Needs ``optimizer=``; off by default.

    The wire dtype, the outer rule and its step, ``staleness``, ``max_staleness``,
    ``active_window`` and ``buffers`` are recorded in the shared model's layout: a learner
    asking for other values is refused. ``every``, ``keep`` and ``fragment_bytes`` are each
    learner's own. A parameter frozen (``requires_grad=False``) here but not in the learner
    that started the shared model, or the reverse, is warned about on entering
    (``RuntimeWarning``): it is shared all the same.

    Raises:
        ConfigurationError: a bad option; on entering, a model unlike the shared one, or
            an Exchange entered before (each ``with`` block takes a new one).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        mailbox: Mailbox,
        learner_id: str | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        batch_size: int | None = None,
        every: int = 1,
        outer: str | OuterRule = "average",
        outer_lr: float | None = None,
        staleness: float | None = 1.0,
        max_staleness: int | None = 64,
        wire: str = "float32",
        fragment_bytes: int = DEFAULT_FRAGMENT_BYTES,
        name: str = "model",
        active_window: float | None = None,
        keep: int = 3,
        buffers: bool = True,
        patience: float = DEFAULT_PATIENCE_S,
        gain: bool = False,
        lease: float | None = None,
    ) -> None:
        self.model = model
        self.every = positive(every, "every", integer=True)
        self._tensors = ModelTensors(checked_model(model), buffers=buffers)
        closing = threading.Event()
        applier = build_applier(
            self._tensors,
            mailbox,
            launcher_learner_id() if learner_id is None else learner_id,
            Settings(
                resolve(outer, outer_lr),
                staleness,
                max_staleness,
                wire,
                active_window_seconds(active_window, lease),
                buffers,
                batch_size,
            ),
            Storage(Keys(name), fragment_bytes, keep, patience),
            closing,
        )
        # Owned by the exchange thread once started (the training thread joins before it):
        self._handoff = Handoff(applier, closing)
        self._snapshot: State | None = None  # the model handed over, until adopted
        # The values of the last two snapshots made (in host memory: kept_for_reuse). The
        # next is copied into the older: its exchange, and any fresher read handed back
        # for it, ended before the newer one's outcome could be adopted (one thread runs
        # them in turn), so nothing reads it any more.
        self._recent: deque[torch.Tensor] = deque(maxlen=2)
        self._since = 0
        self._optimizer = stepping(optimizer, model)
        meter = GradientMeter(model.parameters()) if wants_gain(gain, self._optimizer) else None
        self._work = Work(batch_size, self._handoff.applier.learner_id, self.every, meter=meter)
        # Warns when the loop does not take the batch asked (with batch_size= only).
        self._check = BatchCheck(self.learner_id) if batch_size is not None else None
        self._hooks: list[RemovableHandle] = []
        #: "new", then "entered", then "left": one with block per Exchange.
        self._phase = "new"

    # -- the training loop's side ------------------------------------------------------------

    @property
    def learner_id(self) -> str:
        """This learner's id in the shared model."""
        return self._handoff.applier.learner_id

    @property
    def batch_size(self) -> int:
        """How many items this learner's next step should take: ``batch_size`` scaled by
        this learner's speed over the fastest active learner's, at least 1.

        Read it before each step and take exactly that many items: each learner then steps
        at the fastest one's pace, and its deltas are weighted by the items they cover. A
        loop whose training forwards keep carrying another number of items (four steps
        running) is warned about once (``RuntimeWarning``): its deltas would be weighted
        as if it had taken this many.

        Raises:
            ConfigurationError: the Exchange was made without ``batch_size=``.
        """
        self._need_batch_size()
        return self._work.batch

    def _hand_out_batch(self) -> int:
        """:attr:`batch_size`, for a batch made ahead of its step (``ExchangeBatchSampler``):
        the batch check accepts its size however many steps later the loop takes it."""
        batch = self.batch_size
        if self._check is not None:
            self._check.handed(batch)
        return batch

    @property
    def group_batch(self) -> float:
        """Items the whole group trains on per step time (the active learners' batches
        together; ``batch_size`` alone), as of the version last adopted. The shared model
        takes about one step on this many items per step time: set the learning rate as
        for that batch (AdamW: ``lr * (exchange.group_batch / batch_size) ** 0.5``, tuned).

        Raises:
            ConfigurationError: the Exchange was made without ``batch_size=``.
        """
        self._need_batch_size()
        return self._work.group_batch()

    def _need_batch_size(self) -> None:
        if self._work.batch_size is None:
            raise ConfigurationError(
                "Exchange(batch_size=...) was not given: pass the batch your fastest learner "
                "takes, and each learner's exchange.batch_size follows its speed"
            )

    @property
    def stats(self) -> ExchangeStats:
        """This learner's figures so far: one consistent snapshot (see :class:`ExchangeStats`)."""
        return self._handoff.tally.snapshot(self._handoff.applier.store.traffic)

    def __enter__(self) -> Exchange:
        if self._phase != "new":
            raise ConfigurationError(
                f"this Exchange of learner {self.learner_id!r} was entered before: make a new "
                "Exchange for each with block"
            )
        handoff = self._handoff
        state, version, stored = handoff.applier.join(self._initial)
        frozen = frozen_difference(stored, handoff.applier.layout)
        if frozen is not None:
            warnings.warn(
                f"shared model {handoff.applier.store.keys.name!r}, learner "
                f"{self.learner_id!r}: parameters {frozen}; freeze the same parameters on "
                "every learner",
                RuntimeWarning,
                stacklevel=2,
            )
        handoff.tally.joined(version)
        self._tensors.assign(state)
        handoff.start()
        self._phase = "entered"
        if self._check is not None and (watching := self._check.attach(self.model)):
            self._hooks.append(watching)
        if self._optimizer is not None:
            self._hooks.append(self._optimizer.register_step_post_hook(self._optimizer_stepped))
            if meter := self._work.meter:
                self._hooks.append(meter.attach(self._optimizer))
        log.info(
            "%s joined shared model %r at version %d",
            self.learner_id,
            handoff.applier.store.keys.name,
            version,
        )
        return self

    def _initial(self) -> State:
        """This model's state, to publish as the first version (on the CPU)."""
        values, counts = self._tensors.state()
        return State(values.cpu(), counts)

    def step(self) -> None:
        """Count one local step; adopt a finished exchange; start one every ``every`` steps.

        For a loop without an optimizer hooked (``optimizer=``). Never waits for the store.

        Raises:
            ConfigurationError: outside the ``with`` block, or with ``optimizer=`` given
                (its steps are counted already).
            LeaseLostError: a newer incarnation of this learner id took over; or the
                exchange thread's own error, if it failed.
        """
        if self._optimizer is not None:
            raise ConfigurationError(
                f"the Exchange of learner {self.learner_id!r} counts each optimizer.step() "
                "itself (optimizer=): drop the exchange.step() call, which would count every "
                "step twice"
            )
        self._count_step()

    def _optimizer_stepped(self, *_: object) -> None:
        """The optimizer's post-hook: one local step."""
        self._count_step()

    def _count_step(self) -> None:
        """One local step, from :meth:`step` or the optimizer's hook: the one place steps
        are counted."""
        if self._phase != "entered":
            raise ConfigurationError(
                f"Exchange.step() outside its with block (learner {self.learner_id!r}): "
                "nothing would reach the shared model; train inside "
                "`with Exchange(...) as exchange:`"
            )
        began = time.perf_counter()
        with self._handoff.lock:
            self._handoff.raise_failure()
            self._since += 1
            # judged against the batch asked before this step, not the next one's
            slip = self._check.stepped(self._work.batch) if self._check else None
            self._work.stepped()
            self._adopt_locked()
            if self._snapshot is None and self._since >= self.every:
                self._submit_locked(leaving=False)
            self._handoff.next_step_at = self._work.next_step_at()
            self._handoff.tally.stepped(time.perf_counter() - began)
        if slip is not None:  # once the step is counted whole: warnings may be errors
            warnings.warn(slip, RuntimeWarning, stacklevel=3)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._phase = "left"
        try:
            if exc_type is None:
                self._leave()
        finally:
            self._handoff.close()

    def _leave(self) -> None:
        """Exchange what changed since the version adopted, wait for it and adopt it, and
        mark this learner gone."""
        handoff = self._handoff
        with handoff.lock:
            if self._snapshot is not None:
                handoff.wait()
            self._handoff.raise_failure()
            self._adopt_locked()
            self._submit_locked(leaving=True)
            handoff.wait()
            self._handoff.raise_failure()
            self._adopt_locked(exact=True)

    def _submit_locked(self, leaving: bool) -> None:
        """Hand the thread a snapshot; when leaving with the model still the version
        adopted, none (the thread is idle then: the anchor is safe to read)."""
        if leaving and self._tensors.equal(self._handoff.applier.anchor):
            self._snapshot = self._handoff.applier.anchor  # the model is the adopted version
            self._handoff.submit(None, leaving, self._work.handed_over())
        else:
            spare = self._recent[0] if len(self._recent) == 2 else None
            self._snapshot = self._tensors.state(into=spare)
            if kept_for_reuse(self._snapshot.values):
                self._recent.append(self._snapshot.values)
            else:  # moved to a GPU: hold no host copies for good
                self._recent.clear()
            self._handoff.submit(self._snapshot, leaving, self._work.handed_over())
        self._since = 0

    def _adopt_locked(self, exact: bool = False) -> None:
        """Take the shared version the thread produced, keeping the steps made meanwhile:
        one in-place addition of the thread's ``shared - snapshot``, or, ``exact`` (the
        last adoption, on leaving), ``shared + (model - snapshot)``, which leaves the model
        bit for bit the shared version when it did not change since it was handed over."""
        if self._snapshot is None:
            return
        outcome = self._handoff.take()
        if outcome is None:
            return
        change = outcome.correction
        if exact or change is None:
            values, counts = self._tensors.state()
            shared, snapshot = outcome.shared, self._snapshot
            device = values.device
            self._tensors.assign(
                State(
                    shared.values.to(device) + difference(values, snapshot.values.to(device)),
                    torch.maximum(shared.counts, counts),
                )
            )
        else:
            self._tensors.add(change)
        self._snapshot = None
        if outcome.paces is not None:
            self._work.others = outcome.paces
