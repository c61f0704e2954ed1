"""A model's shared tensors as one flat vector, and the wire codec that stores it.

:class:`ModelTensors` names the tensors of a model that a shared model holds, in one fixed
order, and moves them between the model and a :class:`State`: one flat fp32 vector and
one int64 vector. :func:`to_wire` and :func:`from_wire` turn the fp32 vector into the bytes
a version stores, in the wire dtype. Nothing here touches a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from gradientmail._errors import ConfigurationError

__all__ = [
    "WIRE_DTYPES",
    "ModelTensors",
    "State",
    "check_wire",
    "corrected",
    "difference",
    "from_wire",
    "kept_for_reuse",
    "to_wire",
]

WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def check_wire(wire: str) -> torch.dtype:
    """The dtype named ``wire``; ``ConfigurationError`` listing the accepted names."""
    if wire not in WIRE_DTYPES:
        raise ConfigurationError(
            f"wire={wire!r} is not supported; use one of {sorted(WIRE_DTYPES)}"
        )
    return WIRE_DTYPES[wire]


def to_wire(values: torch.Tensor, wire: torch.dtype) -> tuple[bytes, torch.Tensor]:
    """fp32 values as bytes in ``wire``, and the fp32 values those bytes hold (what every
    reader will read). bf16 rounds stochastically, so that rounding is unbiased."""
    if wire == torch.float32:
        values = values.contiguous()
        return values.numpy().tobytes(), values
    bits = values.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32)
    rounded = ((bits + noise) & -65536).view(torch.float32)
    rounded = torch.where(torch.isfinite(rounded), rounded, values).to(torch.bfloat16)
    return rounded.view(torch.int16).numpy().tobytes(), rounded.float()


def from_wire(data: bytes, wire: torch.dtype) -> torch.Tensor:
    """The fp32 values that :func:`to_wire` wrote."""
    if wire == torch.float32:
        return torch.frombuffer(bytearray(data), dtype=torch.float32)
    return torch.frombuffer(bytearray(data), dtype=torch.bfloat16).float()


def _described(named: Sequence[tuple[str, torch.Tensor]]) -> list[list[Any]]:
    return [
        [name, list(tensor.shape), str(tensor.dtype).removeprefix("torch.")]
        for name, tensor in named
    ]


def _is_count(tensor: torch.Tensor) -> bool:
    """An integer tensor (``num_batches_tracked``): shared as its largest value."""
    return not tensor.is_floating_point() and not tensor.is_complex() and tensor.dtype != torch.bool


class State(NamedTuple):
    """A version's contents: ``values``, fp32 (the parameters and floating buffers, then
    the outer rule's own state), and ``counts``, int64 (the integer buffers)."""

    values: torch.Tensor
    counts: torch.Tensor


def difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a - b``, and 0 wherever the two are equal: a value that did not change is no
    change even when it is infinite (an attention mask's ``-inf`` buffer gives 0, not NaN)."""
    return torch.where(a == b, torch.zeros((), dtype=a.dtype, device=a.device), a - b)


def corrected(shared: State, snapshot: State) -> State:
    """What adopting ``shared`` adds to a model that was ``snapshot`` when handed over, on
    the snapshot's device: ``shared - snapshot`` for the values (steps made since are kept
    by adding it, :meth:`ModelTensors.add`), and the shared counts."""
    values = shared.values[: snapshot.values.numel()].to(snapshot.values.device)
    return State(difference(values, snapshot.values), shared.counts)


def kept_for_reuse(values: torch.Tensor) -> bool:
    """Whether a snapshot's ``values`` are kept, to copy the snapshot after next into: in
    host memory only. There, fresh memory costs a large model more than the copy itself
    (page faults: 25 ms against 3 ms for 64 MiB); on a GPU the caching allocator reuses
    memory already, and a spare kept would hold a model's size of it for nothing."""
    return values.device.type == "cpu"


class ModelTensors:
    """The tensors of ``model`` that a shared model holds, in a fixed order.

    The parameters (``named_parameters`` order), then with ``buffers`` the persistent
    floating-point buffers (``running_mean``), which move under the outer rule as the
    parameters do; the persistent integer buffers (``num_batches_tracked``) are shared
    as their largest value. Other buffers (boolean, complex, non-persistent) stay local.
    Buffers are looked up by name at each use, so a module that replaces one keeps it
    shared.
    """

    def __init__(self, model: torch.nn.Module, *, buffers: bool = True) -> None:
        self._model = model
        self._params = list(model.named_parameters())
        floats: list[str] = []
        counts: list[str] = []
        if buffers:
            persistent = model.state_dict(keep_vars=True).keys()
            for name, buffer in model.named_buffers():
                if name not in persistent:
                    continue
                if buffer.is_floating_point():
                    floats.append(name)
                elif _is_count(buffer):
                    counts.append(name)
        self._floats, self._counts = floats, counts
        #: Elements of the fp32 vector: the parameters, then the floating buffers.
        self.numel = sum(p.numel() for _, p in self._params) + sum(
            b.numel() for _, b in self._named(floats)
        )
        #: Elements of the int64 vector of integer buffers.
        self.count_numel = sum(b.numel() for _, b in self._named(counts))

    def _named(self, names: list[str]) -> list[tuple[str, torch.Tensor]]:
        return [(name, self._model.get_buffer(name)) for name in names]

    def _values(self) -> list[tuple[str, torch.Tensor]]:
        return [*self._params, *self._named(self._floats)]

    def describe(self) -> dict[str, list[Any]]:
        """``[name, shape, dtype]`` of every parameter (``params``) and shared buffer
        (``buffers``), and the names of the parameters frozen here (``frozen``)."""
        return {
            "params": _described(self._params),
            "buffers": _described(self._named(self._floats) + self._named(self._counts)),
            "frozen": [name for name, p in self._params if not p.requires_grad],
        }

    def state(self, into: torch.Tensor | None = None) -> State:
        """The tensors now: fp32 values on their device, int64 counts on the CPU (copies).

        Args:
            into: a former state's values, no longer read by anyone, to copy the values
                into when it fits (their size, on their device): a large model's fresh
                memory costs more than the copy itself (page faults on a CPU).
        """
        pieces = [t.detach().reshape(-1).float() for _, t in self._values()]
        if into is not None and into.numel() == self.numel and into.device == pieces[0].device:
            return State(torch.cat(pieces, out=into), self._count_vector())
        return State(torch.cat(pieces), self._count_vector())

    def _count_vector(self) -> torch.Tensor:
        named = self._named(self._counts)
        if not named:
            return torch.zeros(0, dtype=torch.int64)
        return torch.cat([t.detach().reshape(-1).to("cpu", torch.int64) for _, t in named])

    def assign(self, state: State) -> None:
        """Copy ``state`` into the tensors, in order (``values`` may hold more: the rule's)."""
        with torch.no_grad():
            for tensor, piece in self._pieces(self._values(), state.values):
                tensor.copy_(piece.to(device=tensor.device, dtype=tensor.dtype))
            for tensor, piece in self._pieces(self._named(self._counts), state.counts):
                tensor.copy_(piece.to(device=tensor.device, dtype=tensor.dtype))

    def add(self, change: State) -> None:
        """Add ``change.values`` to the tensors in place, in order, and raise each count to
        ``change.counts`` where that is larger (integer buffers take the largest value)."""
        with torch.no_grad():
            for tensor, piece in self._pieces(self._values(), change.values):
                tensor.add_(piece.to(device=tensor.device, dtype=tensor.dtype))
            for tensor, piece in self._pieces(self._named(self._counts), change.counts):
                piece = piece.to(device=tensor.device, dtype=tensor.dtype)
                torch.maximum(tensor, piece, out=tensor)

    def equal(self, state: State) -> bool:
        """Whether the tensors hold exactly ``state`` (cast as :meth:`assign` would)."""
        for tensor, piece in [
            *self._pieces(self._values(), state.values),
            *self._pieces(self._named(self._counts), state.counts),
        ]:
            if not torch.equal(tensor.detach(), piece.to(device=tensor.device, dtype=tensor.dtype)):
                return False
        return True

    @staticmethod
    def _pieces(
        named: list[tuple[str, torch.Tensor]], flat: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        pieces, offset = [], 0
        for _, tensor in named:
            n = tensor.numel()
            pieces.append((tensor, flat[offset : offset + n].view_as(tensor)))
            offset += n
        return pieces
