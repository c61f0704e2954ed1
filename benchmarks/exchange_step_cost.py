"""What an exchange costs the training loop, by model size: ``step()``'s blocked time.

One learner on ``file://`` (tmpfs where there is one) trains a stack of four square linear
layers for ``--steps`` optimizer steps, each padded to ``--step-ms``, with ``every=1`` and
``every=8``. It prints the milliseconds ``step()`` blocked per exchange and as a share of
the wall time, and, measured in the same run, one plain copy of the model's parameters
(``torch.cat`` into the same vector again, and into fresh memory). An exchange costs the
loop about two passes over the parameters (the snapshot, copied into the memory of the
snapshot before last, and the adoption, one in-place addition), so its ratio to one copy
should stay near 2 to 3; the share of the wall time falls with ``every``.

    python benchmarks/exchange_step_cost.py [--widths 512,1024,2048] [--steps 80]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

import gradientmail
from gradientmail.torch import Exchange


def build(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])


def copy_ms(model: torch.nn.Module, fresh: bool, repeats: int = 20) -> float:
    """One plain copy of the parameters into one flat vector, in ms (the median): into
    ``fresh`` memory each time, or into the same vector again."""
    pieces = [p.detach().reshape(-1) for p in model.parameters()]
    into = torch.cat(pieces)
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        if fresh:
            torch.cat(pieces)
        else:
            torch.cat(pieces, out=into)
        times.append(time.perf_counter() - began)
    return 1000 * sorted(times)[len(times) // 2]


def run(width: int, every: int, steps: int, step_s: float, root: str) -> tuple[int, float, float]:
    """``(exchanges, blocked seconds, wall seconds)`` of one learner's ``steps`` steps."""
    box = gradientmail.from_url(Path(tempfile.mkdtemp(dir=root)).as_uri())
    model = build(width)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with Exchange(model, mailbox=box, learner_id="a", optimizer=optimizer, every=every) as ex:
        began = time.monotonic()
        for _ in range(steps):
            time.sleep(step_s)  # the step's compute, padded
            for p in model.parameters():
                p.grad = torch.full_like(p, 1e-3)
            optimizer.step()
        wall = time.monotonic() - began
        return ex.stats.exchanges, ex.stats.blocked_s, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="512,1024,2048", help="layer widths, in turn")
    parser.add_argument("--steps", type=int, default=80, help="steps per run")
    parser.add_argument("--step-ms", type=float, default=60.0, help="a step's padded time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = "/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()
    for width in (int(w) for w in args.widths.split(",")):
        model = build(width)
        params = sum(p.numel() for p in model.parameters())
        floor, fresh = copy_ms(model, fresh=False), copy_ms(model, fresh=True)
        print(
            f"{params / 1e6:.1f}M parameters ({params * 4 / 2**20:.0f} MiB): one copy "
            f"{floor:.1f} ms ({fresh:.1f} ms into fresh memory)"
        )
        for every in (1, 8):
            exchanges, blocked, wall = run(width, every, args.steps, args.step_ms / 1000, root)
            per = 1000 * blocked / max(1, exchanges)
            print(
                f"  every={every}: {exchanges} exchanges in {args.steps} steps, "
                f"{per:.1f} ms blocked an exchange ({per / floor:.1f}x one copy), "
                f"{100 * blocked / wall:.1f} % of the wall time"
            )


if __name__ == "__main__":
    main()
