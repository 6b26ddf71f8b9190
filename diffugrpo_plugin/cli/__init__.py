"""The ``diffugrpo`` command line. It sits on top of the framework; nothing imports it.

Each sub-command lives in its own module exposing ``add_parser(subparsers)``, which
registers its parser and sets ``func`` (called with the parsed args, returns an exit code).
Modules keep heavy imports (torch, transformers) inside ``func`` so ``--help`` is instant.
Bad input ends with :func:`report_error`: one line on stderr naming the fault and the fix, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from diffugrpo_plugin import __version__
from diffugrpo_plugin.data.records import one_line

SUBCOMMAND_MODULES = ["generate", "rewards", "data", "evaluate", "plot", "check_model", "sandbox"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="diffugrpo",
        description="Coupled-GRPO for masked diffusion LMs on verl: generate, score, prepare data, evaluate, plot, "
        "check a model, check the sandbox.",
    )
    parser.add_argument("--version", action="version", version=f"diffugrpo {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"diffugrpo_plugin.cli.{name}").add_parser(subparsers)
    return parser


def report_error(command: str, error: BaseException | str) -> int:
    """Prints ``diffugrpo <command>: error: <message>`` as one line on stderr; returns the exit code, 2."""
    print(f"diffugrpo {command}: error: {one_line(error)}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
