"""The reader of a shared model for evaluation or export: :func:`load_shared`."""

from __future__ import annotations

import torch

from gradientmail._errors import ConfigurationError
from gradientmail._exchange.layout import Keys, check_model, shared_settings
from gradientmail._exchange.reader import VersionReader
from gradientmail._exchange.store import SharedStore
from gradientmail._exchange.tensors import WIRE_DTYPES, ModelTensors, check_wire
from gradientmail._exchange.watch import HeadWatch
from gradientmail.mailbox import Mailbox

__all__ = ["load_shared"]


def load_shared(model: torch.nn.Module, mailbox: Mailbox, *, name: str = "model") -> int:
    """Load the current shared parameters of ``name`` into ``model``; return their version.

    Works on any mailbox (a plain read): for evaluation, export, or a model outside the run.

    Raises:
        ConfigurationError: no shared model of that name is in the mailbox, or ``model``
            does not match it (the first difference is named).
        InvalidDataError: the shared model's records are damaged (a version that cannot be
            read, within a bounded time; a fragment of another length; a deleted head),
            naming the keys.
    """
    keys = Keys(name)
    layout = SharedStore(mailbox, keys, WIRE_DTYPES["float32"], 1, 1).read_layout()
    if layout is None:
        raise ConfigurationError(
            f"{mailbox.url} holds no shared model named {name!r}: an Exchange publishes it "
            "when its first learner enters"
        )
    settings = shared_settings(layout)
    tensors = ModelTensors(model, buffers=bool(settings.get("buffers", False)))
    check_model(layout, tensors.describe(), f"shared model {name!r}")
    wire = check_wire(str(settings.get("wire")))
    parts = int(settings.get("parts", 1))
    elements = (tensors.numel * parts, tensors.count_numel)
    store = SharedStore(mailbox, keys, wire, 1, 1, elements, watch=HeadWatch(keys.head))
    got = VersionReader(store, versioned=False).current()
    if got is None:
        if store.stored_versions() > 0:
            raise store.missing()
        raise ConfigurationError(f"shared model {name!r} in {mailbox.url} has no version yet")
    head, _version, state = got
    tensors.assign(state)
    return head.version
