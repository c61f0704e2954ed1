"""Type-level guarantees, checked by mypy over ``tests/`` (``make lint``) and at run time.

Every built-in backend satisfies the :class:`~gradientmail.Mailbox` protocol structurally,
without a ``cast``: if one stops doing so, mypy fails on the function below.
"""

from __future__ import annotations

from pathlib import Path

from gradientmail import Mailbox, SupportsCompareAndSwap
from gradientmail.backends.azure import AzureMailbox
from gradientmail.backends.gcs import GCSMailbox
from gradientmail.backends.local import FileMailbox
from gradientmail.backends.memory import MemoryMailbox
from gradientmail.backends.s3 import S3Mailbox


def every_builtin_backend(
    memory: MemoryMailbox, local: FileMailbox, s3: S3Mailbox, gcs: GCSMailbox, azure: AzureMailbox
) -> list[Mailbox]:
    """Checked by mypy only: each argument must be assignable to ``Mailbox``."""
    return [memory, local, s3, gcs, azure]


def every_builtin_backend_swaps(
    memory: MemoryMailbox, local: FileMailbox, s3: S3Mailbox, gcs: GCSMailbox, azure: AzureMailbox
) -> list[SupportsCompareAndSwap]:
    """Checked by mypy only: each backend also satisfies the compare-and-swap protocol."""
    return [memory, local, s3, gcs, azure]


def test_local_backends_are_mailboxes_at_run_time(tmp_path: Path) -> None:
    boxes = every_builtin_backend.__annotations__  # the static check above is the real one
    assert set(boxes) == {"memory", "local", "s3", "gcs", "azure", "return"}
    for box in (MemoryMailbox("types"), FileMailbox(str(tmp_path))):
        assert isinstance(box, Mailbox)
        assert isinstance(box, SupportsCompareAndSwap)
