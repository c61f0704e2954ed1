"""The ``gradientmail`` command line (also ``python -m gradientmail``).

One module per command in this package, each only argument parsing and printing; the work
is done by the library module it names:

* ``gradientmail race URL``: a small multi-process claim race that prints who won what
  (:mod:`gradientmail.conformance.races`);
* ``gradientmail conformance URL``: the conformance suite (:mod:`gradientmail.conformance`);
* ``gradientmail status URL``: a run's progress (:mod:`gradientmail.status`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType

#: subcommand → (module, one-line help). Each module has ``add_arguments(parser)`` and
#: ``run(args) -> int``.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "race": ("gradientmail.cli.race", "race processes to claim keys and print who won what"),
    "conformance": ("gradientmail.cli.conformance", "check that a store is safe to coordinate on"),
    "status": ("gradientmail.cli.status", "show a run's learners, units left and ETA"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="gradientmail", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules: dict[str, ModuleType] = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if importlib.util.find_spec(module_name) is None:
            continue  # a feature not built into this version
        module = importlib.import_module(module_name)
        module.add_arguments(sub_parser)
        modules[name] = module
    args = parser.parse_args(argv)
    chosen = modules.get(args.command)
    if chosen is None:
        parser.error(f"the {args.command!r} command is not available in this installation")
    from gradientmail.errors import GradientMailError

    try:
        return int(chosen.run(args))
    except GradientMailError as exc:
        print(f"gradientmail {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
