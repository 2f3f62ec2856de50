"""The ``grammask`` command line: ``grammask demo | generate | conformance``.

Each subcommand lives in its own module, imported only when it runs, which defines ``HELP`` (one
line), ``add_arguments(parser)`` and ``run(args) -> int``. Errors grammask raises on purpose are
printed as one line (no traceback) and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from grammask.errors import GrammaskError

SUBCOMMANDS = {
    "demo": "grammask.demo",
    "generate": "grammask.generate_cli",
    "conformance": "grammask.conformance.cli",
}


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(prog="grammask", description="Constrained decoding for language models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, module_name in SUBCOMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if exc.name != module_name:
                raise
            continue  # not built yet in this version
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.HELP))
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args) or 0)
    except GrammaskError as exc:
        print(f"grammask {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"grammask {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"grammask {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
