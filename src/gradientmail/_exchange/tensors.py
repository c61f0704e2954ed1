"""A model's shared tensors as one flat vector, and the wire codec that stores it.

:class:`ModelTensors` names the tensors of a model that a shared model holds, in one fixed
order (``named_parameters``'), and moves them between the model and one flat fp32 vector.
:func:`to_wire` and :func:`from_wire` turn such a vector into the bytes a version stores,
in the wire dtype. Nothing here touches a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gradientmail._errors import ConfigurationError

__all__ = ["WIRE_DTYPES", "ModelTensors", "check_wire", "from_wire", "to_wire"]

WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def check_wire(wire: str) -> torch.dtype:
    """The dtype named ``wire``; ``ConfigurationError`` listing the accepted names."""
    if wire not in WIRE_DTYPES:
        raise ConfigurationError(
            f"wire={wire!r} is not supported; use one of {sorted(WIRE_DTYPES)}"
        )
    return WIRE_DTYPES[wire]


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


def _described(named: Sequence[tuple[str, torch.Tensor]]) -> list[list[Any]]:
    return [
        [name, list(tensor.shape), str(tensor.dtype).removeprefix("torch.")]
        for name, tensor in named
    ]


class ModelTensors:
    """The tensors of ``model`` that a shared model holds: its parameters, in order.

    The list is taken once, here: moving the model (``model.to(device)``) keeps it valid,
    since torch moves parameters in place.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self._params = list(model.named_parameters())
        #: Elements in the flat vector.
        self.numel = sum(p.numel() for _, p in self._params)

    def describe(self) -> list[list[Any]]:
        """``[name, shape, dtype]`` for every parameter, in ``named_parameters`` order."""
        return _described(self._params)

    def flat(self) -> torch.Tensor:
        """The tensors as one fp32 vector on their device (a copy)."""
        return torch.cat([p.detach().reshape(-1).float() for _, p in self._params])

    def assign(self, values: torch.Tensor) -> None:
        """Copy a flat fp32 vector into the tensors, in order."""
        offset = 0
        with torch.no_grad():
            for _, p in self._params:
                n = p.numel()
                piece = values[offset : offset + n].view_as(p)
                p.copy_(piece.to(device=p.device, dtype=p.dtype))
                offset += n

    def equal(self, values: torch.Tensor) -> bool:
        """Whether the tensors hold exactly ``values`` (cast as :meth:`assign` would)."""
        offset = 0
        for _, p in self._params:
            n = p.numel()
            piece = values[offset : offset + n].view_as(p)
            if not torch.equal(p.detach(), piece.to(device=p.device, dtype=p.dtype)):
                return False
            offset += n
        return True
