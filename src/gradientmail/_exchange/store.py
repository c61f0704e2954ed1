"""Reading and writing versions of a shared model: fragments, the head swap, collection.

Costs, for ``P`` bytes of state in the wire dtype cut into ``F = ceil(P / fragment_bytes)``
fragments:

* reading a version: 1 GET of the head and ``F`` GETs (``P`` bytes);
* writing a version: ``F`` PUTs (``P`` bytes), then one conditional PUT of the head;
* a lost swap: the ``F`` fragments it wrote are deleted (``F`` DELETEs) and it tries again;
* collection: the writer of a new version deletes the fragments of the version that fell
  out of the ``keep`` kept (``F`` DELETEs). Every 16th version its writer also lists
  ``data/`` once and deletes fragments that can never become current (those of a killed
  writer). No listing happens anywhere else.

So storage holds at most ``keep`` versions, plus one version in flight per learner writing,
plus what killed writers left since the last 16th version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from gradientmail._errors import ConfigurationError, InvalidDataError, KeyNotFoundError
from gradientmail._exchange.layout import Head, Keys, new_data_token, token_version
from gradientmail._exchange.stats import ExchangeTraffic
from gradientmail._record_codec import decode_record, encode_record
from gradientmail.mailbox import Mailbox, Version

WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
SWEEP_EVERY = 16


class Superseded(Exception):
    """A fragment of the version being read was collected: read the head again."""


def describe(model: torch.nn.Module) -> list[list[Any]]:
    """``[name, shape, dtype]`` for every parameter, in ``named_parameters`` order."""
    return [
        [name, list(param.shape), str(param.dtype).removeprefix("torch.")]
        for name, param in model.named_parameters()
    ]


def first_difference(mine: list[list[Any]], shared: list[list[Any]]) -> str:
    """The first parameter in which two descriptions differ, in words."""
    for index, (a, b) in enumerate(zip(mine, shared, strict=False)):
        if a != b:
            return (
                f"parameter {index}: this model has {a[0]} {tuple(a[1])} {a[2]}, the shared "
                f"one {b[0]} {tuple(b[1])} {b[2]}"
            )
    if len(mine) != len(shared):
        return f"this model has {len(mine)} parameters, the shared one {len(shared)}"
    return "none"


def to_wire(values: torch.Tensor, wire: torch.dtype) -> bytes:
    """fp32 values as bytes in ``wire``; bf16 rounds stochastically, so rounding is unbiased."""
    if wire == torch.float32:
        return values.contiguous().numpy().tobytes()
    bits = values.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32)
    rounded = ((bits + noise) & -65536).view(torch.float32)
    rounded = torch.where(torch.isfinite(rounded), rounded, values)
    return rounded.to(torch.bfloat16).view(torch.int16).numpy().tobytes()


def from_wire(data: bytes, wire: torch.dtype) -> torch.Tensor:
    """The fp32 values that :func:`to_wire` wrote."""
    if wire == torch.float32:
        return torch.frombuffer(bytearray(data), dtype=torch.float32)
    return torch.frombuffer(bytearray(data), dtype=torch.bfloat16).float()


@dataclass
class SharedStore:
    """One shared model's versions in a mailbox. Holds no state between calls but its config."""

    mailbox: Mailbox
    keys: Keys
    wire: torch.dtype
    fragment_bytes: int
    keep: int
    #: Requests and bytes so far, for ``Exchange.stats``.
    traffic: ExchangeTraffic = field(default_factory=ExchangeTraffic)

    def fragments_for(self, elements: int) -> int:
        itemsize = torch.empty((), dtype=self.wire).element_size()
        return max(1, math.ceil(elements * itemsize / self.fragment_bytes))

    # -- layout -----------------------------------------------------------------------------

    def ensure_layout(self, layout: dict[str, Any]) -> None:
        """Create the layout record, or check this model against the one stored.

        Raises:
            ConfigurationError: the shared model has other parameters, wire dtype or rule,
                naming the first difference.
        """
        if self.mailbox.put_if_absent(self.keys.layout, encode_record(layout)):
            return
        stored = decode_record(self.mailbox.get(self.keys.layout)) or {}
        where = f"the shared model {self.keys.name!r} in {self.mailbox.url}"
        if stored.get("params") != layout["params"]:
            difference = first_difference(layout["params"], stored.get("params") or [])
            raise ConfigurationError(
                f"this model does not match {where}: {difference}. Pass the same model, or "
                "another name= for a second shared model"
            )
        for option in ("wire", "rule", "parts"):
            if stored.get(option) != layout[option]:
                raise ConfigurationError(
                    f"{where} was started with {option}={stored.get(option)!r}, this learner "
                    f"asks for {layout[option]!r}; every learner must use the same"
                )

    # -- the head ---------------------------------------------------------------------------

    def read_head(self) -> tuple[Head, Version] | None:
        self.traffic = self.traffic.plus(requests=1)
        try:
            data, version = self.mailbox.get_versioned(self.keys.head)
        except KeyNotFoundError:
            return None
        self.traffic = self.traffic.plus(read=len(data))
        return Head.decode(data, self.keys.head), version

    def read_head_plain(self) -> Head | None:
        """The head by a plain read, for readers on a store without compare-and-swap."""
        try:
            return Head.decode(self.mailbox.get(self.keys.head), self.keys.head)
        except KeyNotFoundError:
            return None

    def read_layout(self) -> dict[str, Any] | None:
        try:
            return decode_record(self.mailbox.get(self.keys.layout)) or {}
        except KeyNotFoundError:
            return None

    def swap_head(self, head: Head, expected: Version) -> Version | None:
        """Compare-and-swap the head; ``None`` when another write came first."""
        data = head.encode()
        self.traffic = self.traffic.plus(requests=1, written=len(data))
        return self.mailbox.put_if_match(self.keys.head, data, expected)

    def create_head(self, head: Head) -> bool:
        data = head.encode()
        self.traffic = self.traffic.plus(requests=1, written=len(data))
        return self.mailbox.put_if_absent(self.keys.head, data)

    # -- versions ---------------------------------------------------------------------------

    def read_state(self, head: Head) -> torch.Tensor:
        """The flat fp32 state of ``head``'s version.

        Raises:
            Superseded: a fragment was already collected (the head moved on meanwhile).
        """
        chunks = []
        for index in range(head.fragments):
            try:
                chunks.append(self.mailbox.get(self.keys.fragment(head.token, index)))
            except KeyNotFoundError as exc:
                raise Superseded(head.token) from exc
            finally:
                self.traffic = self.traffic.plus(requests=1)
        self.traffic = self.traffic.plus(read=sum(len(chunk) for chunk in chunks))
        return from_wire(b"".join(chunks), self.wire)

    def write_state(self, version: int, state: torch.Tensor) -> tuple[str, int]:
        """Write ``state`` as the fragments of a new token; return the token and count."""
        token = new_data_token(version)
        data = to_wire(state, self.wire)
        itemsize = torch.empty((), dtype=self.wire).element_size()
        step = max(itemsize, self.fragment_bytes // itemsize * itemsize)
        count = max(1, math.ceil(len(data) / step))
        self.traffic = self.traffic.plus(requests=count, written=len(data))
        for index in range(count):
            # A create, not a put: the token is new, and on file:// a create takes no lock,
            # so a learner stopped mid-write holds up no one else's writes.
            key = self.keys.fragment(token, index)
            if not self.mailbox.put_if_absent(key, data[index * step : (index + 1) * step]):
                raise InvalidDataError(f"{key} existed before this learner wrote it")
        return token, count

    def delete_data(self, token: str, count: int) -> None:
        self.traffic = self.traffic.plus(requests=count)
        for index in range(count):
            self.mailbox.delete(self.keys.fragment(token, index))

    def collect(self, head: Head, dropped: list[list[Any]]) -> None:
        """Delete the versions that left the history; every 16th version, sweep orphans."""
        for _version, token, count in dropped:
            self.delete_data(str(token), int(count))
        if head.version % SWEEP_EVERY == 0:
            self.sweep(head)

    def sweep(self, head: Head) -> int:
        """Delete fragments that can never become current; return how many keys went.

        A token whose version is at most the head's and that the history does not name was
        written by a swap that lost or a writer that died: no later swap can name it, since
        a swap that creates version ``v`` names a token written for ``v``.
        """
        kept = {str(entry[1]) for entry in head.history}
        gone = 0
        for key in self.mailbox.list(self.keys.data):
            token = key[len(self.keys.data) :].split("/", 1)[0]
            version = token_version(token)
            if version is not None and version <= head.version and token not in kept:
                self.mailbox.delete(key)
                gone += 1
        return gone

    def next_history(
        self, head: Head, version: int, token: str, count: int
    ) -> tuple[list[list[Any]], list[list[Any]]]:
        """The history after adding a version, and the entries that fell out of it."""
        history = [*head.history, [version, token, count]]
        return history[-self.keep :], history[: -self.keep]


def flat(model: torch.nn.Module) -> torch.Tensor:
    """The model's parameters as one fp32 vector on their device (a copy)."""
    return torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])


def assign(model: torch.nn.Module, values: torch.Tensor) -> None:
    """Copy a flat fp32 vector into the parameters, in order."""
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(values[offset : offset + n].view_as(p).to(device=p.device, dtype=p.dtype))
            offset += n


def check_wire(wire: str) -> torch.dtype:
    if wire not in WIRE_DTYPES:
        raise ConfigurationError(
            f"wire={wire!r} is not supported; use one of {sorted(WIRE_DTYPES)}"
        )
    return WIRE_DTYPES[wire]


def load_shared(model: torch.nn.Module, mailbox: Mailbox, *, name: str = "model") -> int:
    """Load the current shared parameters of ``name`` into ``model``; return their version.

    Works on any mailbox (a plain read): for evaluation, export, or a model outside the run.

    Raises:
        ConfigurationError: no shared model of that name is in the mailbox, or ``model``
            does not match it (the first difference is named).
    """
    layout = SharedStore(mailbox, Keys(name), WIRE_DTYPES["float32"], 1, 1).read_layout()
    if layout is None:
        raise ConfigurationError(
            f"{mailbox.url} holds no shared model named {name!r}: an Exchange publishes it "
            "when its first learner enters"
        )
    mine = describe(model)
    if layout.get("params") != mine:
        difference = first_difference(mine, layout.get("params") or [])
        raise ConfigurationError(f"this model does not match shared model {name!r}: {difference}")
    store = SharedStore(mailbox, Keys(name), check_wire(str(layout.get("wire"))), 1, 1)
    while True:
        head = store.read_head_plain()
        if head is None:
            raise ConfigurationError(f"shared model {name!r} in {mailbox.url} has no version yet")
        try:
            state = store.read_state(head)
        except Superseded:
            continue
        assign(model, state[: sum(p.numel() for p in model.parameters())])
        return head.version
