"""A task where more data per step clearly helps, for ``benchmarks/unequal_gpus.py --task``.

Each sequence counts up by its own stride modulo 64 from a random start, and a quarter of
its tokens are replaced by random ones. A small MLP predicts each token from the two
before it (18,624 parameters). The noise makes a gradient from a few sequences a poor
estimate: with AdamW at each batch's best lr, a batch of 36 sequences reaches a held-out
loss of 2.8 or 2.7 in about 2.1x fewer steps than a batch of 16 (the ideal is 36 / 16 =
2.25x), and the gradient noise scale ``B_simple`` along the run is 130-300 sequences, well
above the group batch of 36. ``bytes_transformer.py``, the default task, is the opposite
regime: there ``B_simple`` is close to the group batch. Data is drawn afresh for every
batch number, so no run repeats an item.
"""

from __future__ import annotations

from functools import cache

import torch
from torch import nn

BATCH = 16
LR = 4.5e-3
TARGETS = (2.9, 2.8, 2.7)
BASE_MS = 60.0
VOCAB = 64
LENGTH = 32
#: The share of tokens drawn at random instead of following their sequence's stride.
NOISE = 0.25


def _sequences(seed: int, size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (size, 1), generator=generator)
    stride = torch.randint(1, 8, (size, 1), generator=generator)
    tokens = (start + stride * torch.arange(LENGTH + 1)) % VOCAB
    noise = torch.rand(tokens.shape, generator=generator) < NOISE
    tokens[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=generator)
    return tokens


class PairMLP(nn.Module):
    """Predicts each token from the two before it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, VOCAB))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pairs = torch.cat([self.embed(tokens[:, :-1]), self.embed(tokens[:, 1:])], dim=-1)
        return self.mlp(pairs)  # type: ignore[no-any-return]


def build_model() -> nn.Module:
    return PairMLP()


def batch(index: int, size: int) -> torch.Tensor:
    """``size`` sequences of ``LENGTH + 1`` tokens, drawn from seed ``index``."""
    return _sequences(index, size)


def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 2:].reshape(-1))


@cache
def _held_out() -> torch.Tensor:
    return _sequences(987_654_321, 2048)


def heldout_loss(model: nn.Module) -> float:
    with torch.no_grad():
        return float(loss(model, _held_out()).item())
