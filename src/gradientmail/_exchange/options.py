"""An Exchange's arguments, checked in one place, and the parts they build.

:class:`Settings` are what every learner of a shared model must share: they are recorded
in its layout (``shared``, a mapping of name to value, so that a new setting is one line of
:meth:`Settings.recorded`) and a learner asking for other values is refused.
:class:`Storage` is each learner's own (``every`` and ``keep`` may differ too).
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from gradientmail._counting import Counting, RequestTally
from gradientmail._errors import ConfigurationError, NotSupportedError
from gradientmail._exchange.applier import Applier
from gradientmail._exchange.layout import Keys
from gradientmail._exchange.membership import Membership
from gradientmail._exchange.reader import VersionReader
from gradientmail._exchange.rules import OuterRule, OuterStep
from gradientmail._exchange.stats import Tally
from gradientmail._exchange.store import SharedStore
from gradientmail._exchange.tensors import ModelTensors, check_wire
from gradientmail._exchange.watch import HeadWatch
from gradientmail._keys import validate_segment
from gradientmail._torch_world import separate_process
from gradientmail.backends._base import new_write_id
from gradientmail.backends._options import LeaseMeaning, lease_seconds, positive, redact
from gradientmail.mailbox import Capability, Mailbox
from gradientmail.patterns._patience import Patient

__all__ = ["Settings", "Storage", "active_window_seconds", "build_applier", "stepping"]

#: Seconds after its last exchange a learner stops counting as active, unless given.
DEFAULT_ACTIVE_WINDOW = 600.0


@dataclass(frozen=True)
class Settings:
    """The options every learner of one shared model must share."""

    rule: OuterRule
    staleness: float | None
    max_staleness: int | None
    wire: str
    active_window: float
    buffers: bool
    #: The fastest learner's batch (``Exchange(batch_size=)``); ``None``: not given.
    batch_size: int | None = None

    def __post_init__(self) -> None:
        staleness = self.staleness
        if staleness is not None and (
            isinstance(staleness, bool)
            or not isinstance(staleness, (int, float))
            or not staleness >= 0
        ):
            raise ConfigurationError(f"staleness must be a number >= 0 or None, not {staleness!r}")
        positive(self.max_staleness, "max_staleness", integer=True, allow_none=True)
        check_wire(self.wire)
        positive(self.batch_size, "batch_size", integer=True, allow_none=True)
        if not isinstance(self.buffers, bool):
            raise ConfigurationError(f"buffers must be True or False, not {self.buffers!r}")

    def recorded(self) -> dict[str, Any]:
        """The settings as the layout records them, by name."""
        rule = self.rule
        return {
            "wire": self.wire,
            "rule": rule.name,
            "parts": rule.parts,
            "outer_lr": getattr(rule, "lr", None),
            "momentum": getattr(rule, "momentum", None),
            "delay": getattr(rule, "delay", None),
            "staleness": self.staleness,
            "max_staleness": self.max_staleness,
            "active_window": self.active_window,
            "buffers": self.buffers,
            "batch_size": self.batch_size,
        }


@dataclass(frozen=True)
class Storage:
    """Where the shared model lives, how this learner writes it, and how long its requests
    ride out an outage (``patience`` seconds from a request's first failure)."""

    keys: Keys
    fragment_bytes: int
    keep: int
    patience: float


def checked_model(model: object) -> torch.nn.Module:
    """``model``, if it is a module with parameters."""
    if not isinstance(model, torch.nn.Module):
        raise ConfigurationError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if not any(p.numel() for p in model.parameters()):
        raise ConfigurationError("the model has no parameters to share")
    return model


def build_applier(
    tensors: ModelTensors,
    mailbox: Mailbox,
    learner_id: str,
    settings: Settings,
    storage: Storage,
    closing: threading.Event,
) -> Applier:
    """The applier of one learner, with its store, its ledger entry and its layout record.

    Its requests ride out an outage of up to ``storage.patience`` seconds (the shared
    policy of :class:`~gradientmail.patterns._patience.Patient`), unless ``closing`` is set.

    Raises:
        NotSupportedError: the mailbox has no compare-and-swap.
        ConfigurationError: a bad option, or a mailbox that is not shared across processes
            in a process that is one of several.
    """
    if not mailbox.supports(Capability.COMPARE_AND_SWAP):
        raise NotSupportedError(
            f"{mailbox.url} has no compare-and-swap, which an Exchange needs to apply each "
            "learner's progress exactly once; use file://, s3://, gs://, az:// or memory://"
        )
    _require_shared(mailbox)
    learner = validate_segment(learner_id, "learner id")
    rule = settings.rule
    patience = float(positive(storage.patience, "patience"))
    tally = Tally()
    # Every request, each try of it and each delete, is counted by one door (the traffic).
    requests = RequestTally()
    counted = Counting(mailbox, requests)
    store = SharedStore(
        Patient(counted, patience, closing, f"exchange learner {learner!r}"),
        storage.keys,
        check_wire(settings.wire),
        positive(storage.fragment_bytes, "fragment_bytes", integer=True),
        positive(storage.keep, "keep", integer=True),
        (tensors.numel * rule.parts, tensors.count_numel),
        cleanup=counted,
        tally=tally,
        requests=requests,
        watch=HeadWatch(storage.keys.head, learner, settings.active_window),
    )
    layout = {
        **tensors.describe(),
        "numel": tensors.numel,
        "counts": tensors.count_numel,
        "shared": settings.recorded(),
    }
    return Applier(
        Membership(store, learner, new_write_id(), tally),
        VersionReader(store, stop=closing),
        OuterStep(rule, settings.staleness, settings.max_staleness),
        active_window=settings.active_window,
        layout=layout,
    )


def _require_shared(mailbox: Mailbox) -> None:
    """Refuse a mailbox that is not shared across processes where this is one of several."""
    if mailbox.supports(Capability.SHARED_ACROSS_PROCESSES):
        return
    where = separate_process()
    if where is not None:
        raise ConfigurationError(
            f"Exchange over {redact(mailbox.url)} {where}: this mailbox is not shared across "
            "processes, so each process would train its own model in its own store; use a "
            "shared store (file://, s3://, gs://, az://)"
        )


def stepping(optimizer: object, model: torch.nn.Module) -> torch.optim.Optimizer | None:
    """``optimizer``, checked to step some of ``model``'s parameters."""
    if optimizer is None:
        return None
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigurationError(
            f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}"
        )
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not any(id(p) in stepped for p in model.parameters()):
        raise ConfigurationError(
            "the optimizer steps none of this model's parameters: pass the optimizer built "
            "on model.parameters()"
        )
    return optimizer


#: What ``active_window`` means, for its errors and warnings.
ACTIVE_WINDOW = LeaseMeaning(
    forever="a learner that stopped would count as active forever, and every learner's "
    "share of the group's pace would still be reckoned with its pace",
    choose="how long after its last exchange a learner stops counting as active "
    f"({DEFAULT_ACTIVE_WINDOW:g} is the default)",
    long="a learner that stopped counts as active that long",
)


def active_window_seconds(active_window: float | None, lease: float | None) -> float:
    """``active_window`` (600 s when not given), or ``lease=``, its deprecated former name."""
    if lease is None:
        window = DEFAULT_ACTIVE_WINDOW if active_window is None else active_window
        return lease_seconds(window, "active_window", ACTIVE_WINDOW)
    if active_window is not None:
        raise ConfigurationError(
            "pass active_window= only: lease= is its former name, and both were given"
        )
    warnings.warn(
        "Exchange(lease=) is renamed active_window= (seconds after its last exchange a "
        "learner stops counting as active); lease= will be removed in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    return lease_seconds(lease, "active_window", ACTIVE_WINDOW)
