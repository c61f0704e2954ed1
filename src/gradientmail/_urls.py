"""Opening mailboxes by URL: parsing, options and the scheme registry.

``from_url(url, **options)`` picks a backend by the URL's scheme:

==================  ================================================================
``memory://NAME``   one in-process store per name (``gradientmail.backends.memory``)
``file:///dir``     a local or shared POSIX directory; a plain path works too
``s3://bucket/p``   Amazon S3 or any S3-compatible store (extra ``s3``)
``gs://bucket/p``   Google Cloud Storage, alias ``gcs://`` (extra ``gcs``)
``az://cont/p``     Azure Blob Storage (extra ``azure``)
other schemes       the ``gradientmail.backends`` entry-point group
==================  ================================================================

Options come as keyword arguments or URL query parameters (``?fsync=false``); giving one
both ways with different values is an error. Every backend rejects options it does not know,
listing the ones it accepts.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata
from typing import Any, Protocol

from gradientmail._errors import ConfigurationError
from gradientmail.backends._options import (
    SplitURL,
    file_url,
    parse_bool,
    parse_options,
    redact,
    require,
    split_store_url,
    split_url,
)
from gradientmail.mailbox import Mailbox

__all__ = [
    "BUILTIN_SCHEMES",
    "ENTRY_POINT_GROUP",
    "SplitURL",
    "from_url",
    "parse_bool",
    "parse_options",
    "redact",
    "require",
    "split_store_url",
    "split_url",
]

ENTRY_POINT_GROUP = "gradientmail.backends"

#: What a URL starts with: an RFC 3986 scheme and its ':'.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")

#: Built-in schemes and the class behind each, imported only when first used so that
#: ``import gradientmail`` never imports a cloud SDK.
BUILTIN_SCHEMES: Mapping[str, str] = {
    "memory": "gradientmail.backends.memory:MemoryMailbox",
    "file": "gradientmail.backends.local:FileMailbox",
    "s3": "gradientmail.backends.s3:S3Mailbox",
    "gs": "gradientmail.backends.gcs:GCSMailbox",
    "gcs": "gradientmail.backends.gcs:GCSMailbox",
    "az": "gradientmail.backends.azure:AzureMailbox",
}


class Factory(Protocol):
    """What a scheme resolves to: ``open(url, **options) -> Mailbox``.

    Built-in backends provide it as the ``open`` classmethod of their
    :class:`~gradientmail.backends._base.BaseMailbox` subclass; a plug-in's entry point may
    name any callable of this shape.
    """

    def __call__(self, url: str, **options: Any) -> Mailbox: ...


@lru_cache(maxsize=1)
def _plugins() -> dict[str, metadata.EntryPoint]:
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        scheme = ep.name.lower()
        if scheme in BUILTIN_SCHEMES:
            # Never let an installed package silently take over s3:// or file://.
            warnings.warn(
                f"ignoring the {ENTRY_POINT_GROUP} plug-in {ep.value!r}: the scheme "
                f"{scheme!r} is built into gradientmail and cannot be replaced; register "
                "it under another scheme name",
                RuntimeWarning,
                stacklevel=3,
            )
            continue
        found[scheme] = ep
    return found


def _builtin(scheme: str) -> Factory:
    module_name, _, attr = BUILTIN_SCHEMES[scheme].partition(":")
    factory: Factory = getattr(importlib.import_module(module_name), attr).open
    return factory


def _factory(scheme: str, url: str) -> Factory:
    if scheme in BUILTIN_SCHEMES:
        return _builtin(scheme)
    plugin = _plugins().get(scheme)
    if plugin is not None:
        factory = plugin.load()
        if not callable(factory):
            raise ConfigurationError(
                f"the {ENTRY_POINT_GROUP} plug-in for {scheme}:// names {plugin.value!r}, "
                "which is not callable; it must name open(url, **options) -> Mailbox"
            )
        return factory  # type: ignore[no-any-return]  # entry points load untyped objects
    known = sorted(set(BUILTIN_SCHEMES) | set(_plugins()))
    raise ConfigurationError(
        f"unknown mailbox URL scheme {scheme!r} in {redact(url)!r}; known schemes: "
        f"{', '.join(s + '://' for s in known)}; third-party stores register in the "
        f"{ENTRY_POINT_GROUP!r} entry-point group"
    )


def _plain_path_url(path: str) -> str:
    """The ``file://`` URL of a plain path, taken literally: no decoding, no query."""
    if "\x00" in path:
        raise ConfigurationError("a mailbox path must not contain a NUL character")
    try:
        absolute = os.path.abspath(path)
    except OSError as exc:  # a relative path while the working directory is gone
        raise ConfigurationError(
            f"cannot resolve the relative path {path!r}: {exc.strerror}; pass an absolute path"
        ) from None
    return file_url(absolute)


def from_url(url: str, **options: Any) -> Mailbox:
    """Open the mailbox at ``url``.

    Args:
        url: ``scheme://location/prefix``, or a plain filesystem path for ``file://``.
            A string is a URL when its first ``/``-separated part holds a ``:``
            (``s3://...``, ``file:///...``); it must then be ``scheme://...``. Anything
            else is a plain path, which means exactly that path: it is not percent-decoded,
            and ``?``, ``#``, tabs and newlines are part of the name (options go in
            ``**options``). A ``file://`` URL is percent-decoded once, as RFC 3986 says.
        **options: backend options; they may also be given as URL query parameters.

    Returns:
        A mailbox. It can be pickled and reopened in another process.

    Raises:
        ConfigurationError: a malformed URL, an unknown scheme, or an unknown or invalid
            option (the message lists what is accepted).
        MissingDependencyError: the backend's optional extra is not installed.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a mailbox URL must be a non-empty str, not {url!r}")
    head = url.split("/", 1)[0]
    if ":" not in head:
        return _factory("file", url)(_plain_path_url(url), **options)
    if not _SCHEME.fullmatch(head) or not url[len(head) :].startswith("//"):
        raise ConfigurationError(
            f"malformed mailbox URL {redact(url)!r}: expected scheme://location, "
            "e.g. file:///data/run1 or s3://bucket/run1 (for a local path whose first "
            "part holds ':', write it as ./PATH)"
        )
    split = split_url(url)
    merged: dict[str, Any] = dict(split.query)
    for name, value in options.items():
        if name in merged and str(merged[name]).lower() != str(value).lower():
            raise ConfigurationError(
                f"option {name!r} is given both in the URL and as a keyword argument, "
                "with different values; give it once"
            )
        merged[name] = value
    base = url.split("?", 1)[0]
    return _factory(split.scheme, url)(base, **merged)
