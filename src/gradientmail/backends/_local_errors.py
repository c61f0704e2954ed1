"""How ``file://`` turns OS errors into gradientmail errors, naming the entry involved."""

from __future__ import annotations

import errno
import os

from gradientmail._errors import AccessDeniedError, BackendError, BucketNotFoundError
from gradientmail.backends import _local_fs as fs

__all__ = ["foreign", "mapped", "removed"]


def where(name: object, root: str) -> str:
    """The path an OS error names, absolute; the root when it names none."""
    if isinstance(name, str) and name:
        return name if os.path.isabs(name) else os.path.join(root, name)
    return root


def removed(root: str, url: str) -> BucketNotFoundError:
    return BucketNotFoundError(
        f"the mailbox directory {root} was removed after this mailbox was opened; "
        "open the URL again to start afresh",
        backend=url,
    )


def foreign(mode: int, name: str, key: str | None, *, root: str, url: str) -> BackendError:
    return BackendError(
        f"{where(name, root)} is a {fs.kind(mode)} where gradientmail keeps a regular "
        "file; it uses nothing else there and never follows a link: remove it",
        key=key,
        backend=url,
    )


def mapped(exc: OSError, key: str | None, *, root: str, url: str) -> BackendError:
    """``exc`` as a gradientmail error (the caller has ruled out a removed root)."""
    path = where(exc.filename, root)
    code = exc.errno
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return AccessDeniedError(
            f"permission denied on {path} ({exc.strerror}); check its owner and mode",
            key=key,
            backend=url,
        )
    if path == root:  # the caller's own path, which may go through links
        message = f"cannot open the mailbox directory {path}: {exc.strerror or exc}"
    elif code == errno.ELOOP:
        message = (
            f"{path} is a symbolic link; gradientmail never follows links inside a "
            "file:// root: remove it"
        )
    elif code == errno.ENOTDIR:
        message = f"{path} is not a directory, but gradientmail keeps one there: remove it"
    elif code == errno.EISDIR:
        message = f"{path} is a directory where gradientmail keeps a file: remove it"
    else:
        message = f"filesystem error on {path}: {exc.strerror or exc}"
    return BackendError(message, key=key, backend=url)
