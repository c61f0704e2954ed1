"""The default task of ``benchmarks/unequal_gpus.py``, and a model for ``--task FILE.py``.

A 2-layer, width-64 causal transformer (137,088 parameters) learns the bytes of the Python
standard library's own ``.py`` files, which every machine has: 2 MB to train on, a tenth of
the files held out. A task file defines four functions and may set a few constants:

* ``build_model() -> nn.Module``: a new model (the benchmark seeds torch before calling it);
* ``batch(index, size)``: batch number ``index`` with ``size`` items, the same every time;
* ``loss(model, batch) -> Tensor``: the training loss on a batch, a mean over its items;
* ``heldout_loss(model) -> float``: the loss on held-out data, the score of every method;
* optional: ``BATCH`` (the fastest learner's batch, default 16), ``LR`` (a good learning
  rate for ``BATCH`` alone, the grids' centre, default 3e-3), ``TARGETS`` (held-out losses
  to reach, easiest first) and ``BASE_MS`` (the fastest learner's step time in
  milliseconds, padded; above what a step of ``BATCH`` really takes on one core).
"""

from __future__ import annotations

import statistics
import sysconfig
from functools import cache
from pathlib import Path

import torch
from torch import nn

BATCH = 16
LR = 3e-3
TARGETS = (2.2, 2.0, 1.8)
BASE_MS = 60.0
CONTEXT = 64


@cache
def corpus() -> tuple[torch.Tensor, torch.Tensor]:
    """The stdlib's own ``.py`` files as bytes: (train, held-out), split 90/10 by file."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    data = [f.read_bytes() for f in files]
    held = b"".join(data[::10])[:200_000]
    train = b"".join(d for i, d in enumerate(data) if i % 10)[:2_000_000]
    return _tokens(train), _tokens(held)


def _tokens(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def _windows(source: torch.Tensor, seed: int, size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(source) - CONTEXT - 1, (size,), generator=generator)
    return torch.stack([source[s : s + CONTEXT + 1] for s in starts.tolist()])


class Decoder(nn.Module):
    """A 2-layer causal transformer over bytes."""

    def __init__(self, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.zeros(CONTEXT, width))
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(width, 256)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        return self.out(self.blocks(x, mask=self.mask, is_causal=True))  # type: ignore[no-any-return]


def build_model() -> nn.Module:
    return Decoder()


def batch(index: int, size: int) -> torch.Tensor:
    """``size`` windows of ``CONTEXT + 1`` bytes; batch ``index`` of any size starts alike."""
    return _windows(corpus()[0], index, size)


def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1))


@cache
def _held_batches() -> list[torch.Tensor]:
    return [_windows(corpus()[1], 10_000 + i, 16) for i in range(8)]


def heldout_loss(model: nn.Module) -> float:
    with torch.no_grad():
        return statistics.fmean(loss(model, b).item() for b in _held_batches())
