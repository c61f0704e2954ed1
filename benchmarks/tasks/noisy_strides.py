"""A task where more data per step clearly helps, for ``benchmarks/unequal_gpus.py --task``.

It is the demo's task (``examples/train_shared_queue.py``, whose model and loss it
imports): each sequence counts up by its own stride modulo 64 from a random start, a
quarter of its tokens are replaced by random ones, and a small MLP predicts each token
from the two before it (18,624 parameters). The noise makes a gradient from a few
sequences a poor estimate: with AdamW at each batch's best lr, a batch of 36 sequences
reaches a held-out loss of 2.8 or 2.7 in about 2.1x fewer steps than a batch of 16 (the
ideal is 36 / 16 = 2.25x), and the gradient noise scale ``B_simple`` along the run is
110-360 sequences, well above the group batch of 36. ``bytes_transformer.py``, the
default task, is the opposite regime: there ``B_simple`` is close to the group batch.
Data is drawn afresh for every batch number, so no run repeats an item.
"""

from __future__ import annotations

import importlib
import sys
from functools import cache
from pathlib import Path

import torch
from torch import nn

# The demo's model, loss and data constants, from the example that trains it. Imported by
# name: the examples are not type-checked, and a plain import would pull this one in.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
demo = importlib.import_module("train_shared_queue")
NOISE: float = demo.NOISE
SEQ: int = demo.SEQ
VOCAB: int = demo.VOCAB

BATCH = 16
LR = 4.5e-3
TARGETS = (2.9, 2.8, 2.7)
BASE_MS = 60.0


def _sequences(seed: int, size: int) -> torch.Tensor:
    """As the demo's dataset: each sequence counts up by its own stride from a random
    start, and a share ``NOISE`` of its tokens are drawn at random instead."""
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (size, 1), generator=generator)
    stride = torch.randint(1, 8, (size, 1), generator=generator)
    tokens = (start + stride * torch.arange(SEQ + 1)) % VOCAB
    noise = torch.rand(tokens.shape, generator=generator) < NOISE
    tokens[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=generator)
    return tokens


def build_model() -> nn.Module:
    model: nn.Module = demo.TinyLM()
    return model


def batch(index: int, size: int) -> torch.Tensor:
    """``size`` sequences of ``SEQ + 1`` tokens, drawn from seed ``index``."""
    return _sequences(index, size)


def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    value: torch.Tensor = demo.token_loss(model, tokens)
    return value


@cache
def _held_out() -> torch.Tensor:
    return _sequences(987_654_321, 2048)


def heldout_loss(model: nn.Module) -> float:
    with torch.no_grad():
        return float(loss(model, _held_out()).item())
