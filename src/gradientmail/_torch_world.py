"""Where this process runs among its siblings: a rank of a ``torch.distributed`` job, a
DataLoader worker, or a process that ``multiprocessing`` started.

A mailbox that is not shared across processes (``memory://``) gives each such process its
own empty store, so the torch adapters refuse it there; this module says where that is.
Imports torch: only ``gradientmail.torch``'s machinery uses it.
"""

from __future__ import annotations

import multiprocessing
import os

import torch.distributed
from torch.utils.data import get_worker_info

__all__ = ["separate_process", "world_size"]


def world_size() -> int:
    """Processes in the ``torch.distributed`` job (1 when there is none)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def separate_process() -> str | None:
    """Where this process is one of several, in words ("in a DataLoader worker ..."), or
    ``None`` for a process on its own."""
    info = get_worker_info()
    if info is not None:
        return f"in a DataLoader worker (num_workers={info.num_workers})"
    processes = world_size()
    if processes > 1:
        return f"in a torch.distributed job of {processes} processes"
    if multiprocessing.parent_process() is not None:
        return "in a process started by multiprocessing, whose copy of the store starts empty"
    return None
