"""The properties the conformance suite checks: one implementation, two front ends.

Each :class:`~gradientmail.conformance._context.Property` is a function of a
:class:`~gradientmail.conformance._context.Context`; the framework lives in
:mod:`gradientmail.conformance._context`. The properties are grouped by what they protect:

* :mod:`.keys`: which keys a store takes, and how it lists them (partial listings, with
  ``start_after``, in :mod:`.listings`);
* :mod:`.values`: the bytes written are the bytes read;
* :mod:`.semantics`: read-after-write, deletes, create-only preconditions,
  compare-and-swap, lost responses, and the stateful model;
* :mod:`.concurrency`: single-winner races and CAS counters with real threads and processes.

Both the CLI (``gradientmail conformance URL``) and the pytest base class
(:class:`gradientmail.conformance.MailboxConformance`) run exactly these functions through
:func:`gradientmail.conformance._runner.run_property`. A property that needs a capability
names it in :attr:`Property.requires`; a mailbox that does not declare it gets SKIP with the
reason, never a silent PASS.
"""

from __future__ import annotations

from gradientmail._errors import ConfigurationError
from gradientmail.conformance import _context as context
from gradientmail.conformance._context import *  # noqa: F403 - the framework, re-exported
from gradientmail.conformance._context import Property
from gradientmail.conformance._properties import concurrency, keys, listings, semantics, values

# Each group's checks and constants, re-exported: this module held them all before.
from gradientmail.conformance._properties.concurrency import *  # noqa: F403 - the group's __all__
from gradientmail.conformance._properties.keys import *  # noqa: F403 - the group's __all__
from gradientmail.conformance._properties.listings import *  # noqa: F403 - part of keys
from gradientmail.conformance._properties.semantics import *  # noqa: F403 - the group's __all__
from gradientmail.conformance._properties.values import *  # noqa: F403 - the group's __all__

__all__ = ["GROUPS", "PROPERTIES", "property_named", "select_properties"]
__all__ += context.__all__
__all__ += keys.__all__
__all__ += listings.__all__
__all__ += values.__all__
__all__ += semantics.__all__
__all__ += concurrency.__all__

#: Every property, in report order: keys, values, semantics and the model, then races.
PROPERTIES: tuple[Property, ...] = (
    *keys.KEY_PROPERTIES,
    *values.VALUE_PROPERTIES,
    *semantics.SEMANTIC_PROPERTIES,
    *concurrency.CONCURRENCY_PROPERTIES,
)


#: Names ``--only`` accepts for several properties at once.
GROUPS: dict[str, tuple[Property, ...]] = {
    "keys": keys.KEY_PROPERTIES,
    "values": values.VALUE_PROPERTIES,
    "semantics": semantics.SEMANTIC_PROPERTIES,
    "concurrency": concurrency.CONCURRENCY_PROPERTIES,
    # Whatever lets two claimants win when it fails: the claims themselves.
    "atomicity": tuple(p for p in PROPERTIES if p.atomicity),
}


def property_named(name: str) -> Property:
    """The property called ``name``.

    Raises:
        KeyError: no property has that name; the message lists them.
    """
    for prop in PROPERTIES:
        if prop.name == name:
            return prop
    raise KeyError(f"no property {name!r}; properties: {', '.join(p.name for p in PROPERTIES)}")


def select_properties(only: str | None) -> list[Property]:
    """The properties and groups named in ``only`` (comma-separated), in report order.

    ``None`` selects every property. A group (:data:`GROUPS`, e.g. ``atomicity``) stands
    for all of its properties.

    Raises:
        ConfigurationError: an unknown name, or none at all; the message lists the names.
    """
    if only is None:
        return list(PROPERTIES)
    names = [p.name for p in PROPERTIES]
    given = {n.strip() for n in only.split(",") if n.strip()}
    unknown = sorted(given - set(names) - set(GROUPS))
    if unknown or not given:
        raise ConfigurationError(
            f"--only names unknown properties {unknown}; properties: {', '.join(names)}; "
            f"groups: {', '.join(GROUPS)}"
        )
    wanted = {p.name for g in given & set(GROUPS) for p in GROUPS[g]} | (given & set(names))
    return [p for p in PROPERTIES if p.name in wanted]
