"""One learner's side of a shared model: join, exchange in the background, adopt, leave."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from types import TracebackType

import torch

from gradientmail._errors import (
    ConfigurationError,
    LeaseLostError,
    NotSupportedError,
    OutcomeUnknownError,
)
from gradientmail._exchange.layout import Head, Keys
from gradientmail._exchange.membership import Membership
from gradientmail._exchange.rules import OuterRule, resolve, staleness_weight
from gradientmail._exchange.stats import ExchangeStats
from gradientmail._exchange.store import (
    SharedStore,
    Superseded,
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
        staleness: the staleness weight's exponent; ``None`` for no weight.
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
        staleness: float | None = 0.5,
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
        self.learner_id = validate_segment(
            launcher_learner_id() if learner_id is None else learner_id, "learner id"
        )
        self.every = positive(every, "every", integer=True)
        self.rule = resolve(outer, outer_lr)
        if staleness is not None and not (isinstance(staleness, (int, float)) and staleness >= 0):
            raise ConfigurationError(f"staleness must be a number >= 0 or None, not {staleness!r}")
        self.staleness = staleness
        self.max_staleness = positive(max_staleness, "max_staleness", integer=True, allow_none=True)
        self.lease = lease_seconds(lease)
        self.numel = sum(p.numel() for p in model.parameters())
        if self.numel == 0:
            raise ConfigurationError("the model has no parameters to share")
        self.store = SharedStore(
            mailbox,
            Keys(name),
            check_wire(wire),
            positive(fragment_bytes, "fragment_bytes", integer=True),
            positive(keep, "keep", integer=True),
        )
        self._layout = {
            "params": describe(model),
            "numel": self.numel,
            "wire": wire,
            "rule": self.rule.name,
            "parts": self.rule.parts,
        }
        self.membership = Membership(self.store, self.learner_id, new_write_id())
        self._stats = ExchangeStats()
        self._lock = threading.Condition()
        self._job: tuple[torch.Tensor | None, bool] | None = None  # (snapshot, leaving)
        self._result: tuple[torch.Tensor, int] | None = None
        self._snapshot: torch.Tensor | None = None
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._since = 0
        # Owned by the exchange thread once started:
        self._seq = 0
        self._anchor: torch.Tensor = torch.empty(0)
        self._anchor_version = -1
        self._cached: tuple[str, torch.Tensor] | None = None

    # -- the training loop's side ------------------------------------------------------------

    @property
    def stats(self) -> ExchangeStats:
        """This learner's figures so far (a snapshot; see :class:`ExchangeStats`)."""
        with self._lock:
            return replace(
                self._stats,
                unknown_outcomes=self.membership.unknown_outcomes,
                requests=self.store.requests,
                bytes_read=self.store.bytes_read,
                bytes_written=self.store.bytes_written,
            )

    def __enter__(self) -> Exchange:
        state, version = self._join()
        assign(self.model, state[: self.numel])
        self._thread = threading.Thread(
            target=self._run, name=f"gradientmail-exchange-{self.learner_id}", daemon=True
        )
        self._thread.start()
        log.info(
            "%s joined shared model %r at version %d",
            self.learner_id,
            self.store.keys.name,
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

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
            self._snapshot = self._anchor  # the local model is the adopted version
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
            count: Callable[[ExchangeStats], ExchangeStats] | None = None
            try:
                if snapshot is None:
                    self.membership.mark_left()
                    shared, version = self._anchor, self._anchor_version
                else:
                    delta = snapshot.detach().to("cpu", torch.float32) - self._anchor
                    shared, version, count = self._apply(delta, leaving)
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

    def _join(self) -> tuple[torch.Tensor, int]:
        """Publish the initial parameters, or register with the shared ones and load them."""
        self.store.ensure_layout(self._layout)
        extra = self.numel * (self.rule.parts - 1)
        head, state = self.membership.join(
            lambda: torch.cat([flat(self.model).cpu(), torch.zeros(extra)])
        )
        return self._adopted(state, head.version, head.token, head.learners[self.learner_id].seq)

    def _adopted(
        self, state: torch.Tensor, version: int, token: str, seq: int
    ) -> tuple[torch.Tensor, int]:
        self._seq = seq
        self._anchor = state[: self.numel].clone()
        self._anchor_version = version
        self._cached = (token, state)
        self._stats = replace(self._stats, version=version)
        return state, version

    def _apply(
        self, delta: torch.Tensor, leaving: bool
    ) -> tuple[torch.Tensor, int, Callable[[ExchangeStats], ExchangeStats]]:
        """Apply ``delta`` to the current shared version exactly once.

        Returns what to adopt, and how the stats count it (``_run`` publishes both at once).
        """
        store = self.store
        pending = self._seq + 1
        while True:
            got = store.read_head()
            if got is None:
                raise ConfigurationError(
                    f"the head of {store.keys.base} was deleted during the run"
                )
            head, expected = got
            entry = head.learners.get(self.learner_id)
            if entry is None or not self.membership.registered(head):
                raise LeaseLostError(
                    f"learner {self.learner_id} was replaced in shared model "
                    f"{store.keys.name!r} by a newer process with the same learner id; this "
                    "one applies nothing more",
                    learner=self.learner_id,
                )
            try:
                current = self._state_of(head)
            except Superseded:
                continue
            if entry.seq >= pending:  # an earlier attempt landed; its response was lost
                return self._done(head, current, entry.staleness, applied=True)
            tau = head.version - self._anchor_version
            dropped = self.max_staleness is not None and tau > self.max_staleness
            if dropped and not leaving:
                log.warning(
                    "%s dropped its progress: %d versions were applied since its anchor "
                    "(max_staleness=%d)",
                    self.learner_id,
                    tau,
                    self.max_staleness,
                )
                return self._done(head, current, tau, applied=False)
            now = time.time()
            active = len(set(head.active_learners(now, self.lease)) | {self.learner_id})
            parts = [current[i * self.numel : (i + 1) * self.numel] for i in range(self.rule.parts)]
            # Staleness beyond one round of the others (active - 1 versions) is what a delta
            # is damped for: with N learners exchanging in turn, N - 1 is the normal case.
            excess = max(0, tau - (active - 1))
            weight = 0.0 if dropped else staleness_weight(excess, self.staleness)
            new_parts, rule_state = self.rule.apply(parts, delta * weight, active, head.rule_state)
            state = torch.cat(new_parts)
            version = head.version + 1
            token, count = store.write_state(version, state)
            head.learners[self.learner_id] = replace(
                entry,
                seq=pending,
                staleness=tau,
                applied_at=now,
                left=leaving,
                blocked_s=self._stats.blocked_s,
                dropped=entry.dropped + int(dropped),
            )
            history, gone = store.next_history(head, version, token, count)
            new = Head(version, token, count, history, head.learners, rule_state)
            try:
                swapped = store.swap_head(new, expected) is not None
            except OutcomeUnknownError:
                self.membership.unknown_outcomes += 1
                continue  # the next read of the head settles it; the fragments stay for sweep
            if not swapped:
                with self._lock:
                    self._stats = replace(self._stats, conflicts=self._stats.conflicts + 1)
                store.delete_data(token, count)
                continue
            store.collect(new, gone)
            return self._done(new, state, tau, applied=not dropped)

    def _state_of(self, head: Head) -> torch.Tensor:
        if self._cached is not None and self._cached[0] == head.token:
            return self._cached[1]
        state = self.store.read_state(head)
        self._cached = (head.token, state)
        return state

    def _done(
        self, head: Head, state: torch.Tensor, tau: int, applied: bool
    ) -> tuple[torch.Tensor, int, Callable[[ExchangeStats], ExchangeStats]]:
        """Adopt ``head``'s version as the new anchor; how the stats count the exchange or drop."""
        self._seq = head.learners[self.learner_id].seq
        self._cached = (head.token, state)
        self._anchor = state[: self.numel].clone()
        self._anchor_version = head.version
        count = partial(ExchangeStats.counted, version=head.version, tau=tau, applied=applied)
        return self._anchor, head.version, count
