"""The ``gradientmail`` command line (also ``python -m gradientmail``).

One module per command in this package, each only argument parsing and printing; the work
is done by the library module it names:

* ``gradientmail race URL``: a small multi-process claim race that prints who won what
  (:mod:`gradientmail.conformance._races`);
* ``gradientmail conformance URL``: the conformance suite (:mod:`gradientmail.conformance`);
* ``gradientmail status URL``: a run's progress (:mod:`gradientmail.status`).

Conventions every command keeps: ``gradientmail --version`` prints the installed version;
help text is plain (:func:`plain` strips the reStructuredText markup of docstrings it is
built from); an error is one line on stderr, ``gradientmail COMMAND: error: ...``, with a
non-zero exit status (2 for gradientmail's own errors, such as a bad URL or option or a
store that refused; 1 for an operating-system error such as an unwritable file). A bug
still shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from collections.abc import Sequence
from types import ModuleType

#: subcommand → (module, one-line help). Each module has ``add_arguments(parser)`` and
#: ``run(args) -> int``.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "race": ("gradientmail._cli.race", "race processes to claim keys and print who won what"),
    "conformance": ("gradientmail._cli.conformance", "check that a store is safe to coordinate on"),
    "status": ("gradientmail._cli.status", "show a run's learners, units left and ETA"),
}


# ``literal`` and :role:`target`, :role:`~a.b.target` or :role:`text <target>`, as
# docstrings write them.
_LITERAL = re.compile(r"``(.+?)``")
_ROLE = re.compile(r":[\w:]+:`(?P<tilde>~?)(?P<body>[^`]+)`")
_LABELLED = re.compile(r"(?P<text>.+?)\s*<[^>]+>")


def plain(text: str) -> str:
    """``text`` without reStructuredText markup, for help shown in a terminal.

    A literal loses its double backticks; a cross-reference becomes its text, its target,
    or (with ``~``) the target's last part.
    """

    def role(match: re.Match[str]) -> str:
        body = match["body"]
        labelled = _LABELLED.fullmatch(body)
        if labelled:
            return labelled["text"]
        return body.rsplit(".", 1)[-1] if match["tilde"] else body

    return _LITERAL.sub(r"\1", _ROLE.sub(role, text))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    from gradientmail import __version__

    parser = argparse.ArgumentParser(
        prog="gradientmail", description=plain(__doc__.splitlines()[0])
    )
    parser.add_argument("--version", action="version", version=f"gradientmail {__version__}")
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
    from gradientmail._errors import GradientMailError

    try:
        return int(chosen.run(args))
    except GradientMailError as exc:
        return _error(args.command, exc, 2)
    except OSError as exc:  # the operating system refused: a file, a folder, a socket
        return _error(args.command, exc, 1)
    except KeyboardInterrupt:
        return 130


def _error(command: str, exc: BaseException, status: int) -> int:
    """Print ``exc`` as the command's one-line error on stderr; return ``status``."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"gradientmail {command}: error: {message}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
