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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit

from gradientmail.errors import ConfigurationError, InvalidKeyError, MissingDependencyError
from gradientmail.keys import validate_key
from gradientmail.mailbox import Mailbox

__all__ = [
    "BUILTIN_SCHEMES",
    "ENTRY_POINT_GROUP",
    "SplitURL",
    "from_url",
    "parse_bool",
    "parse_options",
    "require",
    "split_store_url",
    "split_url",
]

ENTRY_POINT_GROUP = "gradientmail.backends"

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

Factory = Callable[..., Mailbox]


@dataclass(frozen=True)
class SplitURL:
    """A mailbox URL taken apart. ``path`` has no leading ``/`` for object stores."""

    scheme: str
    netloc: str
    path: str
    query: dict[str, str]


def split_url(url: str) -> SplitURL:
    """Split ``url`` into scheme, location, path and query options.

    Raises:
        ConfigurationError: the URL is not a string, has no scheme, or repeats an option.
    """
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"a mailbox URL must be a non-empty str, not {url!r}")
    parts = urlsplit(url)
    if parts.fragment:
        raise ConfigurationError(f"mailbox URL {_safe(url)!r} must not contain a '#fragment'")
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in query:
            raise ConfigurationError(f"option {name!r} is given twice in {_safe(url)!r}")
        query[name] = value
    return SplitURL(parts.scheme.lower(), unquote(parts.netloc), unquote(parts.path), query)


def split_store_url(
    url: str, *, store: str, container: str, name: re.Pattern[str], name_rule: str, example: str
) -> tuple[str, str]:
    """Split an object-store URL ``scheme://CONTAINER/PREFIX`` into (container, prefix).

    The prefix comes back without a leading or trailing ``/`` (``""`` for none) and follows
    the key rules, so that ``prefix + "/" + key`` is a valid object name.

    Args:
        url: the URL, without its query string.
        store: the store's name for messages, e.g. ``"S3"``.
        container: what the store calls a container, e.g. ``"bucket"``.
        name: the pattern a container name must match in full.
        name_rule: the naming rule in words, for messages.
        example: an example URL phrase, e.g. ``"e.g. s3://my-bucket/run1"``.

    Raises:
        ConfigurationError: credentials in the URL (never echoed), no container, an invalid
            container name, or a prefix with an empty, ``.`` or ``..`` segment.
    """
    split = split_url(url)
    if "@" in split.netloc:
        raise ConfigurationError(
            f"{store} URLs must not carry credentials; use the SDK's standard credential "
            f"chain (environment variables, a profile or config file); {example}"
        )
    if not split.netloc:
        raise ConfigurationError(
            f"{store} URL {url!r} names no {container}; use "
            f"{split.scheme}://{container.upper()}/PREFIX, {example}"
        )
    if not name.fullmatch(split.netloc):
        raise ConfigurationError(
            f"invalid {container} name {split.netloc!r} in {url!r}: not a valid {store} "
            f"{container} name ({name_rule}); {example}"
        )
    # One leading "/" separates the prefix; one trailing "/" is conventional.
    prefix = split.path.removeprefix("/").removesuffix("/")
    if prefix and "" in prefix.split("/"):
        raise ConfigurationError(
            f"the prefix {prefix!r} in {url!r} has an empty segment ('//'); {example}"
        )
    if prefix:
        try:
            validate_key(prefix)
        except InvalidKeyError as exc:
            raise ConfigurationError(
                f"the prefix {prefix!r} in {url!r} is not valid: {exc.rule}; {example}"
            ) from None
    return split.netloc, prefix


def _safe(url: str) -> str:
    """The URL without its query string or user info, for messages: options may be secrets."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else parts.path


def parse_bool(value: object) -> bool:
    """Accept ``True``/``False`` or the strings ``true/false/1/0/yes/no/on/off``."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean (true/false), got {value!r}")


def parse_options(
    backend: str,
    given: Mapping[str, Any],
    accepted: Mapping[str, Callable[[Any], Any]],
    defaults: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check and convert options for ``backend``.

    Args:
        backend: the scheme, for messages.
        given: the options the caller passed.
        accepted: option name → converter (called on the raw value; may raise ValueError).
        defaults: values for options not given.

    Raises:
        ConfigurationError: an unknown option (listing the accepted ones) or a bad value.
    """
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        allowed = ", ".join(sorted(accepted)) or "none"
        raise ConfigurationError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {backend}:// mailboxes; "
            f"accepted options: {allowed}"
        )
    result = dict(defaults or {})
    for name, raw in given.items():
        try:
            result[name] = accepted[name](raw)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"option {name!r} for {backend}:// is invalid: {exc}"
            ) from None
    return result


def require(module: str, extra: str) -> Any:
    """Import an optional dependency, or raise ``MissingDependencyError`` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module, extra) from exc


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
    cls = getattr(importlib.import_module(module_name), attr)
    return cast(Factory, cls.open)


def _factory(scheme: str, url: str) -> Factory:
    if scheme in BUILTIN_SCHEMES:
        return _builtin(scheme)
    plugin = _plugins().get(scheme)
    if plugin is not None:
        return cast(Factory, plugin.load())
    known = sorted(set(BUILTIN_SCHEMES) | set(_plugins()))
    raise ConfigurationError(
        f"unknown mailbox URL scheme {scheme!r} in {_safe(url)!r}; known schemes: "
        f"{', '.join(s + '://' for s in known)}; third-party stores register in the "
        f"{ENTRY_POINT_GROUP!r} entry-point group"
    )


def from_url(url: str, **options: Any) -> Mailbox:
    """Open the mailbox at ``url``.

    Args:
        url: ``scheme://location/prefix``, or a plain filesystem path for ``file://``.
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
    if "://" not in url:
        if ":" in url.split("/", 1)[0]:
            raise ConfigurationError(
                f"malformed mailbox URL {_safe(url)!r}: expected scheme://location, "
                "e.g. file:///data/run1 or s3://bucket/run1"
            )
        # A plain path means a local directory.
        url = "file://" + os.path.abspath(url)
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
