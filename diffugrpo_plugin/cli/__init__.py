"""The ``diffugrpo`` command line. It sits on top of the framework; nothing imports it.

Each sub-command lives in its own module exposing ``add_parser(subparsers)``, which
registers its parser and sets ``func`` (called with the parsed args, returns an exit code).
Modules keep heavy imports (torch, transformers) inside ``func`` so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = ["generate", "rewards", "data", "evaluate", "plot", "check_model", "sandbox"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="diffugrpo",
        description="Coupled-GRPO for masked diffusion LMs on verl: generate, score, prepare data, evaluate, plot, "
                    "check a model, check the sandbox.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"diffugrpo_plugin.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
