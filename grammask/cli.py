"""The ``grammask`` command line: ``grammask demo | generate | conformance``.

Each subcommand lives in its own module, which defines ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Those modules import only the standard library and grammask's light
modules at import time (torch, jsonschema and transformers are imported inside ``run``), so
``grammask --help`` and argument errors come back at once; ``run`` checks names and inputs before any
heavy work. Errors grammask raises on purpose are printed as one line (no traceback), naming the
flag the user typed, and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from grammask import __version__
from grammask.errors import GrammaskError, InvalidParameterError

SUBCOMMANDS = {
    "demo": "grammask.demo",
    "generate": "grammask.generate_cli",
    "conformance": "grammask.conformance.cli",
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each subcommand's parser, by name."""
    parser = argparse.ArgumentParser(
        prog="grammask",
        description="Constrained decoding for language models: JSON Schema, regex, EBNF and structural tags "
        "compiled to token bitmasks.",
        epilog="Run 'grammask COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"grammask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers = {}
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        parsers[name] = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP))
        module.add_arguments(parsers[name])
        parsers[name].set_defaults(run=module.run)
    return parser, parsers


def main(argv: list[str] | None = None) -> int:
    parser, parsers = build_parser()
    args = parser.parse_args(argv)
    prefix = f"grammask {args.command}"
    try:
        return int(args.run(args) or 0)
    except InvalidParameterError as exc:
        print(f"{prefix}: error: {_as_typed(exc, parsers[args.command])}", file=sys.stderr)
        return 2
    except (GrammaskError, ImportError) as exc:
        print(f"{prefix}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130


def _as_typed(exc: InvalidParameterError, parser: argparse.ArgumentParser) -> InvalidParameterError:
    """``exc`` naming the option the user typed (``--max-new-tokens``) where its field is an option's
    destination (``max_new_tokens``) or a part of one (``structural_tag.triggers``)."""
    for action in parser._actions:
        if not action.option_strings:
            continue
        if exc.field == action.dest or exc.field.startswith((action.dest + ".", action.dest + "[")):
            flag = action.option_strings[-1] + exc.field[len(action.dest) :]
            return InvalidParameterError(flag, exc.value, exc.allowed)
    return exc


if __name__ == "__main__":
    sys.exit(main())
