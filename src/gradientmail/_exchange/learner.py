"""One learner's side of a shared model: join, exchange in the background, adopt, leave."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from gradientmail._errors import (
    ConfigurationError,
    LeaseLostError,
    NotSupportedError,
)
from gradientmail._exchange.applier import Applied, Applier
from gradientmail._exchange.layout import Keys
from gradientmail._exchange.membership import Membership
from gradientmail._exchange.rules import OuterRule, OuterStep, resolve
from gradientmail._exchange.stats import ExchangeStats
from gradientmail._exchange.store import (
    SharedStore,
    assign,
    check_wire,
    describe,
    flat,
)
from gradientmail._identity import learner_id as launcher_learner_id
from gradientmail._keys import validate_segment
from gradientmail.backends._base import new_write_id
from gradientmail.backends._options import lease_seconds, positive
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns._workers import CarriedError

log = logging.getLogger("gradientmail.exchange")

DEFAULT_FRAGMENT_BYTES = 256 * 2**20


class Exchange:
    """Train one model from learners of unequal speed, through the mailbox.

    Every ``every`` calls of :meth:`step`, a background thread applies this learner's
    progress since its anchor (the shared version it last adopted) to the current shared
    parameters with compare-and-swap; a later :meth:`step` adopts the result, keeping the
    local steps made meanwhile. ``docs/exchange.md`` has the rules, layout and costs.

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
        * :meth:`step` never waits for the store. Leaving normally exchanges the steps left
          and waits for it; leaving through an exception applies nothing more.
        * A newer process with the same ``learner_id`` fences this one: its next
          :meth:`step` raises ``LeaseLostError``.

    Args:
        model: the module whose parameters are shared (buffers stay local).
        mailbox: a mailbox with compare-and-swap (else ``NotSupportedError``).
        learner_id: this learner's id; :func:`gradientmail.learner_id` by default.
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
        lease: seconds after its last exchange a learner stops counting as active.

    Raises:
        ConfigurationError: a bad option, or on entering a model unlike the shared one.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        mailbox: Mailbox,
        learner_id: str | None = None,
        every: int = 50,
        outer: str | OuterRule = "average",
        outer_lr: float | None = None,
        staleness: float | None = 1.0,
        max_staleness: int | None = 64,
        wire: str = "float32",
        fragment_bytes: int = DEFAULT_FRAGMENT_BYTES,
        name: str = "model",
        lease: float = 600.0,
        keep: int = 3,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise ConfigurationError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        if not mailbox.supports(Capability.COMPARE_AND_SWAP):
            raise NotSupportedError(
                f"{mailbox.url} has no compare-and-swap, which an Exchange needs to apply each "
                "learner's progress exactly once; use file://, s3://, gs://, az:// or memory://"
            )
        self.model = model
        self.every = positive(every, "every", integer=True)
        learner = validate_segment(
            launcher_learner_id() if learner_id is None else learner_id, "learner id"
        )
        rule = resolve(outer, outer_lr)
        if staleness is not None and not (isinstance(staleness, (int, float)) and staleness >= 0):
            raise ConfigurationError(f"staleness must be a number >= 0 or None, not {staleness!r}")
        limit = positive(max_staleness, "max_staleness", integer=True, allow_none=True)
        numel = sum(p.numel() for p in model.parameters())
        if numel == 0:
            raise ConfigurationError("the model has no parameters to share")
        store = SharedStore(
            mailbox,
            Keys(name),
            check_wire(wire),
            positive(fragment_bytes, "fragment_bytes", integer=True),
            positive(keep, "keep", integer=True),
        )
        layout = {
            "params": describe(model),
            "numel": numel,
            "wire": wire,
            "rule": rule.name,
            "parts": rule.parts,
        }
        # Owned by the exchange thread once started (the training thread joins before it):
        self._applier = Applier(
            Membership(store, learner, new_write_id()),
            OuterStep(rule, staleness, limit),
            lease=lease_seconds(lease),
            layout=layout,
            on_conflict=self._conflicted,
        )
        self._stats = ExchangeStats()
        self._lock = threading.Condition()
        self._job: tuple[torch.Tensor | None, bool] | None = None  # (snapshot, leaving)
        self._result: tuple[torch.Tensor, int] | None = None
        self._snapshot: torch.Tensor | None = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._since = 0

    # -- the training loop's side ------------------------------------------------------------

    @property
    def learner_id(self) -> str:
        """This learner's id in the shared model."""
        return self._applier.learner_id

    @property
    def stats(self) -> ExchangeStats:
        """This learner's figures so far (a snapshot; see :class:`ExchangeStats`)."""
        store = self._applier.store
        with self._lock:
            return replace(
                self._stats,
                unknown_outcomes=self._applier.membership.unknown_outcomes,
                traffic=store.traffic,
            )

    def __enter__(self) -> Exchange:
        state, version = self._applier.join(lambda: flat(self.model).cpu())
        self._stats = replace(self._stats, version=version)
        assign(self.model, state[: self._applier.numel])
        self._thread = threading.Thread(
            target=self._run, name=f"gradientmail-exchange-{self.learner_id}", daemon=True
        )
        self._thread.start()
        log.info(
            "%s joined shared model %r at version %d",
            self.learner_id,
            self._applier.store.keys.name,
            version,
        )
        return self

    def step(self) -> None:
        """Count one local step; adopt a finished exchange; start one every ``every`` steps.

        Never waits for the store. Raises the exchange thread's error, if it failed
        (``LeaseLostError`` when a newer incarnation of this learner id took over).
        """
        began = time.perf_counter()
        with self._lock:
            self._raise_failure()
            self._stats = replace(self._stats, steps=self._stats.steps + 1)
            self._since += 1
            self._adopt_locked()
            if self._snapshot is None and self._since >= self.every:
                self._submit_locked(leaving=False)
            blocked = self._stats.blocked_s + time.perf_counter() - began
            self._stats = replace(self._stats, blocked_s=blocked)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                self._leave()
        finally:
            with self._lock:
                self._stop = True
                self._lock.notify_all()
            if self._thread is not None:
                self._thread.join()

    def _leave(self) -> None:
        """Exchange what is left, wait for it and adopt it, and mark this learner gone."""
        with self._lock:
            while self._snapshot is not None and self._result is None and self._error is None:
                self._lock.wait()
            self._raise_failure()
            self._adopt_locked()
            self._submit_locked(leaving=True)
            while self._result is None and self._error is None:
                self._lock.wait()
            self._raise_failure()
            self._adopt_locked()

    def _submit_locked(self, leaving: bool) -> None:
        """Hand the thread a snapshot; when leaving with no step since the last, none."""
        if leaving and self._since == 0:
            self._snapshot = self._applier.anchor  # the local model is the adopted version
            self._job = (None, leaving)
        else:
            self._snapshot = flat(self.model)
            self._job = (self._snapshot, leaving)
        self._since = 0
        self._lock.notify_all()

    def _adopt_locked(self) -> None:
        """Take the shared version the thread produced, keeping the steps made meanwhile."""
        if self._result is None or self._snapshot is None:
            return
        shared, _version = self._result
        current = flat(self.model)
        assign(
            self.model, shared.to(current.device) + (current - self._snapshot.to(current.device))
        )
        self._result = None
        self._snapshot = None

    def _raise_failure(self) -> None:
        error = self._error
        if error is None:
            return
        if isinstance(error, LeaseLostError):
            raise LeaseLostError(str(error), learner=self.learner_id) from error
        CarriedError.of(error).reraise(f"the exchange of learner {self.learner_id}")

    # -- the exchange thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._job is None and not self._stop:
                    self._lock.wait()
                if self._job is None:
                    return
                snapshot, leaving = self._job
                self._job = None
                blocked = self._stats.blocked_s
            count: Callable[[ExchangeStats], ExchangeStats] | None = None
            try:
                if snapshot is None:
                    shared, version = self._applier.leave()
                else:
                    shared, version, count = self._apply(snapshot, leaving, blocked)
            except BaseException as exc:  # noqa: BLE001 - carried to the training loop
                with self._lock:
                    self._error = exc
                    self._lock.notify_all()
                return
            with self._lock:
                # One publication: stats never count an exchange that the next step()
                # cannot adopt yet (a loop pacing itself on stats.exchanges relies on it).
                if count is not None:
                    self._stats = count(self._stats)
                self._result = (shared, version)
                self._lock.notify_all()

    def _apply(self, snapshot: torch.Tensor, leaving: bool, blocked_s: float) -> Applied:
        """Apply the progress up to ``snapshot`` through the applier (on the exchange thread)."""
        return self._applier.apply(snapshot, leaving, blocked_s)

    def _conflicted(self) -> None:
        with self._lock:
            self._stats = replace(self._stats, conflicts=self._stats.conflicts + 1)
