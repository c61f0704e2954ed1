"""Built-in backends, one module per URL scheme, and the kit for writing your own.

Each built-in backend's module is imported only when its scheme is used, so importing this
package imports no cloud SDK. What a plug-in needs is here: subclass :class:`BaseMailbox`
and parse its URL and options with the helpers below, so that it refuses bad input exactly
as the built-in backends do (``docs/extending.md``).
"""

from __future__ import annotations

from gradientmail.backends._base import BaseMailbox, Conflict, RetryPolicy, Stat
from gradientmail.backends._options import (
    SplitURL,
    parse_bool,
    parse_options,
    positive,
    positive_float,
    redact,
    require,
    split_store_url,
    split_url,
)

__all__ = [
    "BaseMailbox",
    "Conflict",
    "RetryPolicy",
    "SplitURL",
    "Stat",
    "parse_bool",
    "parse_options",
    "positive",
    "positive_float",
    "redact",
    "require",
    "split_store_url",
    "split_url",
]
